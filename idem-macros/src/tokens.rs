//! Tokens both frameworks' expansions emit: the handler's `Policy` and its registration,
//! the alias of the database nothing names, and the lease as the runtime takes it. Below
//! the expanders, so neither imports the other for them.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use crate::model::{Model, Shell, UNNAMED};
use crate::validate::KeySpec;

/// The alias of the database nothing names, if something names none: one definition,
/// so its compile error (with both databases enabled) is reported once.
pub(crate) fn unnamed_alias(shell: &Shell) -> Option<TokenStream> {
    shell.unnamed.as_ref().map(|ty| {
        let alias = Ident::new(UNNAMED, Span::mixed_site());
        quote!(type #alias = #ty;)
    })
}

/// The handler's `Policy` static and its registration, named `policy`.
pub(crate) fn policy_tokens(model: &Model, policy: &Ident) -> TokenStream {
    let krate = &model.krate;
    let handler_name = model.shell.inner.sig.ident.to_string();
    let scope_name = model.scope.name.to_string();
    let retention_secs = model.retention.as_secs();
    let with_route = model
        .route
        .as_ref()
        .map(|(method, path)| quote!(.with_route(#method, #path)));
    let with_lease = model
        .lease_ms()
        .map(|lease_ms| quote!(.with_lease(#lease_ms)));
    let with_key = model.key.as_ref().map(|key| match key {
        KeySpec::Header(name) => quote!(.with_key(#krate::__private::KeySource::Header(#name))),
        KeySpec::Json(field) => quote!(.with_key(#krate::__private::KeySource::Json(#field))),
    });
    quote! {
        static #policy: #krate::__private::Policy = #krate::__private::Policy::new(
            #handler_name,
            ::core::module_path!(),
            #scope_name,
            #retention_secs,
        )#with_route #with_lease #with_key;
        #krate::__private::inventory::submit! {
            #krate::__private::Registration(&#policy)
        }
    }
}

impl Model {
    /// The lease in milliseconds, as the runtime takes it.
    pub(crate) fn lease_ms(&self) -> Option<u64> {
        self.lease
            .map(|lease| u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
    }
}
