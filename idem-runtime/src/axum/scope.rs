//! The core's scopes as axum extractors.

use std::borrow::Cow;

use ::axum::Extension;
use ::axum::extract::{FromRequestParts, Path};
use http::request::Parts;

use crate::protocol::scope::{ScopeKey, UnverifiedScope};

/// A caller identity set by middleware (`req.extensions_mut().insert(..)`), axum's
/// counterpart of actix-web's `ReqData`.
impl<T: ScopeKey> ScopeKey for Extension<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        self.0.scope_key()
    }
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
}

/// Reads the request's head as `T` does; the last extractor cannot be one, as
/// `UnverifiedScope` names a caller, never a body.
impl<S: Send + Sync, T: FromRequestParts<S>> FromRequestParts<S> for UnverifiedScope<T> {
    type Rejection = T::Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        T::from_request_parts(parts, state).await.map(Self)
    }
}

/// Path parameters, in routes like `/accounts/{id}/orders` behind authorization.
impl<T: ScopeKey> ScopeKey for UnverifiedScope<Path<T>> {
    fn scope_key(&self) -> Cow<'_, str> {
        (self.0).0.scope_key()
    }
}
