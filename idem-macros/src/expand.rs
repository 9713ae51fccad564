//! Turns the checked model into the generated actix handler.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType};

use crate::model::{self, Model, Placement, Role};
use crate::parse;

/// Entry point: never drops the user's function, even on error, so editors keep
/// completing inside it.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "`#[idempotent]` goes on an `async fn` request handler",
            );
            let error = error.into_compile_error();
            return quote!(#item #error);
        }
    };
    let mut errors = parse::Errors::default();
    let args = parse::parse(args, &mut errors);
    match model::check(args, &func, errors) {
        Ok(model) => generate(&model),
        Err(error) => fallback(func, &error),
    }
}

/// The user's function nested in a handler actix can register, so that a route
/// attribute around us reports our error and not "Handler is not satisfied" too.
fn fallback(mut func: ItemFn, error: &syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    // A method cannot be nested in a free function; emit it where it stands.
    if matches!(func.sig.inputs.first(), Some(syn::FnArg::Receiver(_))) {
        return quote!(#func #error);
    }
    model::normalize_tx_params(&mut func);
    let func = &func;
    let outer = outer_handler(func, func.attrs.iter().filter(|a| !is_inner_only(a)));
    let inner = inner_function(func);
    quote! {
        #outer {
            #[allow(dead_code, unused)]
            #inner
            ::core::unreachable!()
        }
        #error
    }
}

fn is_inner_only(attr: &syn::Attribute) -> bool {
    matches!(model::placement(attr), Placement::Inner)
}

/// The signature actix sees: request and raw payload, so idem can read the body once
/// and replay it to each of the user's extractors.
fn outer_handler<'a>(
    func: &ItemFn,
    attrs: impl Iterator<Item = &'a syn::Attribute>,
) -> TokenStream {
    let vis = &func.vis;
    let name = &func.sig.ident;
    let generics = &func.sig.generics;
    let where_clause = &generics.where_clause;
    let mixed = Span::mixed_site();
    let req = syn::Ident::new("__idem_req", mixed);
    let payload = syn::Ident::new("__idem_payload", mixed);
    quote! {
        #(#attrs)*
        #vis async fn #name #generics (
            #req: ::idem::__private::HttpRequest,
            #payload: ::idem::__private::WebPayload,
        ) -> ::idem::__private::HttpResponse #where_clause
    }
}

/// The user's function as written (bar the `Tx` lifetime), minus what moved outward.
fn inner_function(func: &ItemFn) -> ItemFn {
    let mut inner = func.clone();
    inner
        .attrs
        .retain(|attr| !matches!(model::placement(attr), Placement::Outer));
    inner.vis = syn::Visibility::Inherited;
    inner
}

fn generate(model: &Model) -> TokenStream {
    let func = &model.func;
    let name = &func.sig.ident;
    let outer = outer_handler(func, model.outer_attrs.iter());
    let inner = inner_function(func);
    let mixed = Span::mixed_site();
    let req = syn::Ident::new("__idem_req", mixed);
    let payload = syn::Ident::new("__idem_payload", mixed);
    let prepared = syn::Ident::new("__idem_prepared", mixed);
    let body = syn::Ident::new("__idem_body", mixed);
    let request = syn::Ident::new("__idem_request", mixed);
    let scope = syn::Ident::new("__idem_scope", mixed);
    let tx = syn::Ident::new("__idem_tx", mixed);
    let phases = syn::Ident::new("__idem_phases", mixed);
    let policy = syn::Ident::new("__IDEM_POLICY", mixed);

    let handler_name = name.to_string();
    let scope_name = match &func.sig.inputs[model.scope] {
        syn::FnArg::Typed(arg) => quote!(#arg).to_string(),
        syn::FnArg::Receiver(_) => unreachable!("receivers are rejected by the model"),
    };
    let scope_name = scope_name
        .split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let retention_secs = model.retention.as_secs();
    let with_route = model
        .route
        .as_ref()
        .map(|(method, path)| quote!(.with_route(#method, #path)));
    let with_key = model.key.as_ref().map(|key| match key {
        model::KeySpec::Header(name) => {
            quote!(.with_key(::idem::__private::KeySource::Header(#name)))
        }
        model::KeySpec::Json(field) => {
            quote!(.with_key(::idem::__private::KeySource::Json(#field)))
        }
    });
    let with_lease = model.lease.map(|lease| {
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        quote!(.with_lease(#lease_ms))
    });

    let backend = match model.params.iter().find(|p| p.role != Role::Extractor) {
        Some(param) if param.role == Role::Tx => {
            let ty = model::tx_type_static(&param.ty);
            quote_spanned!(param.ty.span()=> <#ty as ::idem::__private::TxBackend>::Backend)
        }
        Some(param) => {
            let ty = &param.ty;
            quote_spanned!(ty.span()=> <#ty as ::idem::__private::PhasesBackend>::Backend)
        }
        None => quote!(<::idem::Tx<'static> as ::idem::__private::TxBackend>::Backend),
    };

    let mut extractions = Vec::new();
    let mut call_args = Vec::new();
    let mut scope_arg = None;
    for (index, param) in model.params.iter().enumerate() {
        match param.role {
            Role::Tx => {
                call_args.push(quote!(#tx));
                continue;
            }
            Role::Phases => {
                call_args.push(quote!(#phases));
                continue;
            }
            Role::Extractor => {}
        }
        let arg = format_ident!("__idem_arg{}", index, span = mixed);
        let ty = &param.ty;
        // Spanned at the parameter's type, so "not an extractor" points there.
        let extract = quote_spanned! {ty.span()=>
            ::idem::__private::extract::<#ty>(#prepared.request(), &mut #body).await
        };
        extractions.push(quote! {
            let #arg: #ty = match #extract {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(response) => return response,
            };
        });
        if index == model.scope {
            scope_arg = Some(quote_spanned! {ty.span()=>
                ::idem::__private::scope_key::<#ty>(&#arg)
            });
        }
        call_args.push(quote!(#arg));
    }
    let scope_value = scope_arg.expect("the scope parameter is always an extractor");

    // Spanned at the return type, so "not a Responder" points at what the user wrote.
    let ret_span = match &func.sig.output {
        ReturnType::Default => name.span(),
        ReturnType::Type(_, ty) => ty.span(),
    };
    let value = syn::Ident::new("__idem_value", mixed);
    let value_at_return = syn::Ident::new("__idem_value", ret_span.resolved_at(mixed));
    let respond = quote_spanned! {ret_span=>
        ::idem::__private::respond(#value_at_return, &#request)
    };
    let run = match model.lease {
        None => quote! {
            #prepared
                .run(&#scope, async move |#tx| {
                    let #value = #name(#(#call_args),*).await;
                    #respond
                })
                .await
        },
        Some(lease) => {
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            quote! {
                #prepared
                    .run_phased(
                        &#scope,
                        ::core::time::Duration::from_millis(#lease_ms),
                        async move |#phases| {
                            let #value = #name(#(#call_args),*).await;
                            #respond
                        },
                    )
                    .await
            }
        }
    };

    quote! {
        #outer {
            #inner

            static #policy: ::idem::__private::Policy = ::idem::__private::Policy::new(
                #handler_name,
                ::core::module_path!(),
                #scope_name,
                #retention_secs,
            )#with_route #with_lease #with_key;
            ::idem::__private::inventory::submit! {
                ::idem::__private::Registration(&#policy)
            }

            let #prepared = match ::idem::__private::prepare::<#backend>(&#policy, #req, #payload).await {
                ::core::result::Result::Ok(prepared) => prepared,
                ::core::result::Result::Err(response) => return response,
            };
            let mut #body = #prepared.payload();
            #(#extractions)*
            let #scope = #scope_value;
            let #request = ::core::clone::Clone::clone(#prepared.request());
            #run
        }
    }
}
