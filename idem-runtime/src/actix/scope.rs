//! The core's scopes as actix-web extractors.

use std::borrow::Cow;

use actix_web::dev::Payload;
use actix_web::web::{Path, Query, ReqData};
use actix_web::{FromRequest, HttpRequest};

use crate::protocol::scope::{ScopeKey, UnverifiedScope};

/// A caller identity set by middleware (`req.extensions_mut().insert(..)`).
impl<T: ScopeKey + Clone + 'static> ScopeKey for ReqData<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
}

/// ```
/// use actix_web::{HttpResponse, web};
/// use idem_runtime::{ScopeKey, UnverifiedScope};
///
/// // Authentication middleware in front of this route checked that the caller may
/// // act for the account in the path.
/// async fn create(account: UnverifiedScope<web::Path<i64>>) -> HttpResponse {
///     HttpResponse::Created().body(format!("for {}", **account))
/// }
/// # let _ = create;
/// # fn scope(s: &UnverifiedScope<web::Path<i64>>) -> String { s.scope_key().into_owned() }
/// ```
impl<T: FromRequest> FromRequest for UnverifiedScope<T> {
    type Error = T::Error;
    type Future = futures_util::future::MapOk<T::Future, fn(T) -> Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        futures_util::TryFutureExt::map_ok(T::from_request(req, payload), Self as fn(T) -> Self)
    }
}

/// Path parameters, in routes like `/accounts/{id}/orders` behind authorization.
impl<T: ScopeKey> ScopeKey for UnverifiedScope<Path<T>> {
    fn scope_key(&self) -> Cow<'_, str> {
        (*self.0).scope_key()
    }
}

/// A query parameter, behind authorization.
impl<T: ScopeKey> ScopeKey for UnverifiedScope<Query<T>> {
    fn scope_key(&self) -> Cow<'_, str> {
        (*self.0).scope_key()
    }
}
