//! The axum expansion: the handler's name becomes a unit struct implementing axum's
//! `Handler` for every router state its extractors accept, the way axum's own function
//! handlers are generic over the state, or, with `state = ..`, for that state alone. The
//! user's function is nested in `call`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use crate::model::{Fallback, Model, Rejected, Shell};
use crate::syntax::{Role, krate_at, local};
use crate::tokens::{Params, param_tokens, policy_tokens, run_tokens, unnamed_alias};

/// The unit struct and the head of its `Handler` impl, up to the `where` clause's end;
/// `bounds` are the extractors' (empty for a rejected handler), over the generic state.
fn shell_tokens(
    krate: &syn::Path,
    shell: &Shell,
    bounds: &[TokenStream],
    marker: &Ident,
) -> TokenStream {
    let name = &shell.inner.sig.ident;
    let state = local("__IdemState");
    let head = quote! {
        impl<#state, #marker> #krate::__private::axum::Handler<(#krate::__private::axum::Marker, #marker), #state> for #name
        where
            #state: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
            #(#bounds,)*
    };
    struct_tokens(shell, head)
}

/// The unit struct and `head`, the head of its `Handler` impl, with the user's attributes.
fn struct_tokens(shell: &Shell, head: TokenStream) -> TokenStream {
    let attrs = &shell.attrs;
    let vis = &shell.vis;
    let name = &shell.inner.sig.ident;
    // `cfg` and `deprecated` go on both items; docs only on the struct, which the
    // application names.
    let both: Vec<_> = attrs
        .iter()
        .filter(|attr| !attr.path().is_ident("doc"))
        .collect();
    quote! {
        #(#attrs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        #(#both)*
        #head
    }
}

/// A handler with mistakes: the struct, and a `Handler` impl whose `call` holds the user's
/// function as written, so that the router still accepts it and editors keep completing.
pub(crate) fn rejected(rejected: &Rejected, tokens: &mut TokenStream) {
    match &rejected.fallback {
        Fallback::AsWritten(func) => func.to_tokens(tokens),
        Fallback::Nested(shell) => {
            let krate = &rejected.krate;
            let marker = local("__IdemMarker");
            let head = shell_tokens(krate, shell, &[quote!(#marker: 'static)], &marker);
            let inner = &shell.inner;
            let state_ty = local("__IdemState");
            let unnamed = unnamed_alias(shell);
            tokens.extend(quote! {
                #head
                {
                    type Future = #krate::__private::axum::HandlerFuture;

                    fn call(self, _: #krate::__private::axum::Request, _: #state_ty) -> Self::Future {
                        #unnamed
                        #[allow(dead_code, unused)]
                        #inner
                        ::core::unreachable!()
                    }
                }
            });
        }
    }
    tokens.extend(rejected.error.as_ref().map(syn::Error::to_compile_error));
}

pub(crate) fn handler(model: &Model, tokens: &mut TokenStream) {
    let krate = &model.krate;
    let inner = &model.shell.inner;
    let name = &inner.sig.ident;
    let req = local("__idem_req");
    let state = local("__idem_state");
    let marker = local("__IdemMarker");
    let prepared = local("__idem_prepared");
    let extraction = local("__idem_extraction");
    let scope = local("__idem_scope");
    let tx = local("__idem_tx");
    let phases = local("__idem_phases");
    let policy = local("__IDEM_POLICY");
    let prepare = if model.redis {
        quote!(#krate::__private::axum::prepare_redis)
    } else {
        let backend = &model.backend;
        quote!(#krate::__private::axum::prepare::<#backend>)
    };
    let policy_items = policy_tokens(model, &policy);

    let last = model
        .params
        .iter()
        .rposition(|param| param.role == Role::Extractor);
    // With `state = ..` the impl is for that state alone, and each extraction's own
    // bound (the runtime's `PartsExtractor`, `BodyExtractor`) is the check, at the
    // parameter's type; without it the impl holds those bounds, so it applies to every
    // state the extractors accept, and a mistake shows where the handler is routed.
    let state_ty = match &model.state {
        Some(ty) => ty.clone(),
        None => local("__IdemState").to_token_stream(),
    };
    let mut bounds = Vec::new();
    let Params {
        extractions,
        call_args,
        scope_value,
    } = param_tokens(model, &tx, &phases, |index, ty, at_ty| {
        if Some(index) == last {
            bounds.push(quote_spanned! {ty.span()=>
                #ty: #at_ty::__private::axum::FromRequest<#state_ty, #marker>
            });
            // axum's own impls decide the marker (through the head or the whole request).
            // With `state = ..` the extraction goes behind a box: see `extract_parts_boxed`.
            match model.state {
                Some(_) => quote_spanned! {ty.span()=>
                    #at_ty::__private::axum::extract_last_boxed::<#ty, #state_ty, _>(#extraction, &#state).await
                },
                None => quote_spanned! {ty.span()=>
                    #at_ty::__private::axum::extract_last::<#ty, #state_ty, #marker>(#extraction, &#state).await
                },
            }
        } else {
            bounds.push(quote_spanned! {ty.span()=>
                #ty: #at_ty::__private::axum::FromRequestParts<#state_ty>
            });
            let extract = match model.state {
                Some(_) => quote!(extract_parts_boxed),
                None => quote!(extract_parts),
            };
            quote_spanned! {ty.span()=>
                #at_ty::__private::axum::#extract::<#ty, #state_ty>(&mut #extraction, &#state).await
            }
        }
    });
    let head = match &model.state {
        None => shell_tokens(krate, &model.shell, &bounds, &marker),
        Some(ty) => struct_tokens(
            &model.shell,
            quote! {
                impl #krate::__private::axum::Handler<#krate::__private::axum::Marker, #ty> for #name
            },
        ),
    };

    let ret_span = model.return_span();
    let value = local("__idem_value");
    let value_at_return = Ident::new(
        "__idem_value",
        ret_span.resolved_at(proc_macro2::Span::mixed_site()),
    );
    let at_ret = krate_at(krate, ret_span);
    let respond = quote_spanned! {ret_span=>
        #at_ret::__private::axum::IntoResponse::into_response(#value_at_return)
    };
    let call = quote!(#name(#(#call_args),*));
    let run = run_tokens(
        model, &prepared, &scope, &tx, &phases, &value, &call, &respond,
    );

    let unnamed = unnamed_alias(&model.shell);
    tokens.extend(quote! {
        #head
        {
            type Future = #krate::__private::axum::HandlerFuture;

            fn call(self, #req: #krate::__private::axum::Request, #state: #state_ty) -> Self::Future {
                #unnamed
                #inner

                #policy_items

                ::std::boxed::Box::pin(async move {
                    let #prepared = match #prepare(&#policy, #req).await {
                        ::core::result::Result::Ok(prepared) => prepared,
                        ::core::result::Result::Err(response) => return response,
                    };
                    // Only `FromRequestParts` extractors borrow it mutably.
                    #[allow(unused_mut)]
                    let mut #extraction = #prepared.extraction();
                    #(#extractions)*
                    let #scope = #scope_value;
                    #run
                })
            }
        }
    });
}
