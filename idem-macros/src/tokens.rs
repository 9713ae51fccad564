//! Tokens both frameworks' expansions emit: the handler's `Policy` and its registration,
//! the alias of the database nothing names, and the lease as the runtime takes it. Below
//! the expanders, so neither imports the other for them.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::model::{Model, Shell, UNNAMED};
use crate::syntax::{Role, krate_at};
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
    let with_redis = model.redis.then(|| quote!(.with_keys_in_redis()));
    quote! {
        static #policy: #krate::__private::Policy = #krate::__private::Policy::new(
            #handler_name,
            ::core::module_path!(),
            #scope_name,
            #retention_secs,
        )#with_route #with_lease #with_key #with_redis;
        #krate::__private::inventory::submit! {
            #krate::__private::Registration(&#policy)
        }
    }
}

/// The call into the core around the user's function: `run` with the transaction,
/// `run_phased` with the lease and the phases, or `run_steps` with the lease and the
/// steps (keys in Redis); `respond` turns the function's value into the framework's
/// response. Both frameworks' adapters have these methods.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_tokens(
    model: &Model,
    prepared: &Ident,
    scope: &Ident,
    tx: &Ident,
    phases: &Ident,
    value: &Ident,
    call: &TokenStream,
    respond: &TokenStream,
) -> TokenStream {
    let run = if model.redis {
        quote!(run_steps)
    } else {
        quote!(run_phased)
    };
    match model.lease_ms() {
        None => quote! {
            #prepared
                .run(&#scope, async move |#tx| {
                    let #value = #call.await;
                    #respond
                })
                .await
        },
        Some(lease_ms) => quote! {
            #prepared
                .#run(
                    &#scope,
                    ::core::time::Duration::from_millis(#lease_ms),
                    async move |#phases| {
                        let #value = #call.await;
                        #respond
                    },
                )
                .await
        },
    }
}

/// What the handler's parameters become in the generated body.
pub(crate) struct Params {
    /// One statement per extractor, in declaration order: its value, or its rejection
    /// answered before any claim.
    pub(crate) extractions: Vec<TokenStream>,
    /// The user's function's arguments, in its order.
    pub(crate) call_args: Vec<TokenStream>,
    /// The scope's value, from the parameter `scope = ..` names.
    pub(crate) scope_value: Option<TokenStream>,
}

/// The parameters' tokens; `extract(index, ty, crate_at_ty)` is the framework's call that
/// extracts the parameter at `index`, the crate path spanned at its type so that "not an
/// extractor" points there.
pub(crate) fn param_tokens(
    model: &Model,
    tx: &Ident,
    phases: &Ident,
    mut extract: impl FnMut(usize, &Type, &TokenStream) -> TokenStream,
) -> Params {
    let mut params = Params {
        extractions: Vec::new(),
        call_args: Vec::new(),
        scope_value: None,
    };
    for (index, param) in model.params.iter().enumerate() {
        match param.role {
            Role::Tx => {
                params.call_args.push(quote!(#tx));
                continue;
            }
            // One form per handler: the phases and the steps take the same binding.
            Role::Phases | Role::Steps => {
                params.call_args.push(quote!(#phases));
                continue;
            }
            Role::Extractor => {}
        }
        let arg = format_ident!("__idem_arg{}", index, span = Span::mixed_site());
        let ty = &param.ty;
        let at_ty = krate_at(&model.krate, ty.span());
        let call = extract(index, ty, &at_ty);
        params.extractions.push(quote! {
            let #arg: #ty = match #call {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(response) => return response,
            };
        });
        if index == model.scope.index {
            params.scope_value = Some(quote_spanned! {ty.span()=>
                #at_ty::__private::stored_scope(
                    &<#ty as #at_ty::ScopeKey>::scope_key(&#arg),
                    <#ty as #at_ty::ScopeKey>::SIGNED_SENDER,
                )
            });
        }
        params.call_args.push(quote!(#arg));
    }
    params
}

impl Model {
    /// The lease in milliseconds, as the runtime takes it.
    pub(crate) fn lease_ms(&self) -> Option<u64> {
        self.lease
            .map(|lease| u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
    }
}
