//! What identifies the caller a key belongs to.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

/// A handler parameter that identifies the caller, named by `#[idempotent(scope = ..)]`.
///
/// Keys are stored per scope value, so one caller's key never matches, blocks or
/// reveals another caller's request. Integers, strings and (with the default `uuid`
/// feature) UUIDs implement it; implement it for your own account or API-key type:
///
/// ```
/// use std::borrow::Cow;
///
/// struct Account {
///     id: i64,
/// }
///
/// impl idem_runtime::ScopeKey for Account {
///     fn scope_key(&self) -> Cow<'_, str> {
///         Cow::Owned(self.id.to_string())
///     }
/// }
///
/// # use idem_runtime::ScopeKey;
/// assert_eq!(Account { id: 7 }.scope_key(), "7");
/// ```
///
/// If one application scopes some endpoints by account and others by API key, give
/// the values distinct prefixes (`"acct:7"`, `"key:7"`) so they cannot coincide.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot scope idempotency keys",
    label = "the `scope` parameter's type must implement `idem::ScopeKey`",
    note = "implement `idem::ScopeKey` for `{Self}`, returning the caller's id as text",
    note = "scope by an authenticated caller; for a path or query value authorized before idem runs, write `idem::UnverifiedScope<{Self}>`"
)]
pub trait ScopeKey {
    /// The caller's identity as text; stored beside each key.
    fn scope_key(&self) -> Cow<'_, str>;
}

macro_rules! display_scope {
    ($($ty:ty),* $(,)?) => {$(
        impl ScopeKey for $ty {
            fn scope_key(&self) -> Cow<'_, str> {
                Cow::Owned(self.to_string())
            }
        }
    )*};
}

display_scope!(
    i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);

#[cfg(feature = "uuid")]
display_scope!(uuid::Uuid);

impl ScopeKey for str {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl ScopeKey for String {
    fn scope_key(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl<T: ScopeKey + ?Sized> ScopeKey for &T {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}

impl<T: ScopeKey + ?Sized> ScopeKey for Box<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}

impl<T: ScopeKey + ?Sized> ScopeKey for Rc<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}

impl<T: ScopeKey + ?Sized> ScopeKey for Arc<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}

/// A scope taken from input the caller chooses (the path, the query string), spelled out
/// where the handler names it.
///
/// The scope decides whose stored answers a request may see: a replay goes to any
/// request with the same scope, key and body. Scoped by an authenticated caller (an
/// extractor that verifies a session or token, or `web::ReqData<T>` set by
/// authentication middleware), a key can only ever answer the caller who made it. Scoped
/// by `/accounts/{id}/..` alone, anyone who knows another account's key and body gets
/// that account's stored answer, even when the handler checks authorization in its body
/// (the replay never runs the body), and can squat the key with a `403` that is then
/// replayed to its owner. So `web::Path` and `web::Query` do not scope keys by
/// themselves: wrap them in `UnverifiedScope` only when authorization happens before
/// idem runs (in middleware, or in an extractor declared before the scope), and say so
/// next to it.
///
/// Each adapter implements the framework's extractor and `ScopeKey` for its path and
/// query types (actix-web: `UnverifiedScope<web::Path<T>>` and
/// `UnverifiedScope<web::Query<T>>`); the wrapper itself only carries the value:
///
/// ```
/// use idem_runtime::UnverifiedScope;
///
/// let account = UnverifiedScope(7_i64);
/// assert_eq!(*account, 7);
/// assert_eq!(account.into_inner(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnverifiedScope<T>(pub T);

impl<T> UnverifiedScope<T> {
    /// The extractor inside.
    ///
    /// ```
    /// let scope = idem_runtime::UnverifiedScope(7_i64);
    /// assert_eq!(scope.into_inner(), 7);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for UnverifiedScope<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
