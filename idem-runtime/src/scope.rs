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
    note = "implement `idem::ScopeKey` for `{Self}`, returning the caller's id as text"
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

/// A caller identity set by middleware (`req.extensions_mut().insert(..)`).
impl<T: ScopeKey + Clone + 'static> ScopeKey for actix_web::web::ReqData<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}

/// Path parameters identify the caller in routes like `/accounts/{id}/orders`.
impl<T: ScopeKey> ScopeKey for actix_web::web::Path<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
}
