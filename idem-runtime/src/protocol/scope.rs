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
///
/// A signed webhook's sender ([`SignedWebhook`](crate::SignedWebhook)) is stored as
/// `webhook:<sender>`, and a value of yours is stored as it is, except that one beginning
/// with `webhook:` or `\` is stored with a `\` in front: no account of yours can be
/// named like a sender and take an event's id before the sender's delivery does.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot scope idempotency keys",
    label = "the `scope` parameter's type must implement `idem::ScopeKey`",
    note = "implement `idem::ScopeKey` for `{Self}`, returning the caller's id as text",
    note = "scope by an authenticated caller; for a path or query value authorized before idem runs, write `idem::UnverifiedScope<{Self}>`"
)]
pub trait ScopeKey {
    /// The caller's identity as text; stored beside each key.
    fn scope_key(&self) -> Cow<'_, str>;

    /// Whether the value is a sender that signed the request, as
    /// [`SignedWebhook`](crate::SignedWebhook)'s is: its keys live in the `webhook:`
    /// namespace, its key must be what the sender signed, and its fingerprint covers only
    /// what the sender signed. Leave it `false` for your own types; wrappers of a scope
    /// (`&T`, `Box<T>`, `web::ReqData<T>`, `Extension<T>`) pass it on.
    ///
    /// ```
    /// use idem_runtime::{ScopeKey, SignedWebhook};
    ///
    /// assert!(<SignedWebhook as ScopeKey>::SIGNED_SENDER);
    /// assert!(!<i64 as ScopeKey>::SIGNED_SENDER);
    /// ```
    const SIGNED_SENDER: bool = false;
}

/// The prefix of a signed sender's scope as stored.
const WEBHOOK_NAMESPACE: &str = "webhook:";

/// Put before a value of the application's own that could otherwise read as a sender's
/// (or as an escaped value), so that no two scopes share a stored form.
const ESCAPE: char = '\\';

/// The scope as the key store keeps it: a signed sender's in the `webhook:` namespace,
/// any other value as it is, escaped when it begins like a sender's or an escaped one.
///
/// Generated handlers call it with `<T as ScopeKey>::..` for both arguments, rather than
/// a function bounded by `ScopeKey`, so that a type that is no `ScopeKey` is reported by
/// the trait, at the type.
#[doc(hidden)]
pub fn namespaced(value: &str, signed_sender: bool) -> String {
    if signed_sender {
        format!("{WEBHOOK_NAMESPACE}{value}")
    } else if value.starts_with(WEBHOOK_NAMESPACE) || value.starts_with(ESCAPE) {
        format!("{ESCAPE}{value}")
    } else {
        value.to_owned()
    }
}

/// Whether a stored scope is a signed sender's: only [`namespaced`] of a
/// [`ScopeKey::SIGNED_SENDER`] type begins with `webhook:`.
pub(crate) fn is_signed_sender(stored: &str) -> bool {
    stored.starts_with(WEBHOOK_NAMESPACE)
}

/// The scope a signed sender's keys were stored under before the namespace: its bare
/// name. Read for one retention after the upgrade, so a redelivery of an event first
/// delivered before it is still answered from its stored row.
pub(crate) fn legacy_sender_scope(stored: &str) -> Option<&str> {
    stored.strip_prefix(WEBHOOK_NAMESPACE)
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
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
}

impl<T: ScopeKey + ?Sized> ScopeKey for Box<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
}

impl<T: ScopeKey + ?Sized> ScopeKey for Rc<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
}

impl<T: ScopeKey + ?Sized> ScopeKey for Arc<T> {
    fn scope_key(&self) -> Cow<'_, str> {
        (**self).scope_key()
    }
    const SIGNED_SENDER: bool = T::SIGNED_SENDER;
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{is_signed_sender, legacy_sender_scope, namespaced};

    proptest! {
        /// No two scopes share a stored form, whatever the values: a sender's and an
        /// account's, or two of the application's values.
        #[test]
        fn stored_forms_are_distinct(
            a in "(webhook:|\\\\|w)?[a-z:\\\\]{0,6}",
            b in "(webhook:|\\\\|w)?[a-z:\\\\]{0,6}",
            a_signed: bool,
            b_signed: bool,
        ) {
            if (a.as_str(), a_signed) != (b.as_str(), b_signed) {
                prop_assert_ne!(namespaced(&a, a_signed), namespaced(&b, b_signed));
            }
            prop_assert_eq!(is_signed_sender(&namespaced(&a, a_signed)), a_signed);
            if a_signed {
                let stored = namespaced(&a, true);
                prop_assert_eq!(legacy_sender_scope(&stored), Some(a.as_str()));
            }
        }
    }

    #[test]
    fn values_are_kept_unless_they_read_as_a_sender() {
        assert_eq!(namespaced("stripe", true), "webhook:stripe");
        assert_eq!(namespaced("stripe", false), "stripe");
        assert_eq!(namespaced("webhook:stripe", false), "\\webhook:stripe");
        assert_eq!(namespaced("\\x", false), "\\\\x");
    }
}
