//! Turns the checked model into tokens. Every fact comes from the model; nothing here
//! reads the user's syntax again.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ReturnType};

use crate::model::{Expansion, Fallback, Framework, Model, Rejected, Shell};
use crate::syntax::{krate_at, local};
use crate::tokens::{Params, param_tokens, policy_tokens, run_tokens, unnamed_alias};

impl ToTokens for Expansion {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            Self::Handler(model) => model.to_tokens(tokens),
            Self::Rejected(rejected) if rejected.framework == Framework::Axum => {
                crate::expand_axum::rejected(rejected, tokens);
            }
            Self::Rejected(rejected) => rejected.to_tokens(tokens),
        }
    }
}

/// The signature actix-web sees: request and raw payload, so idem can read the body once
/// and replay it to each of the user's extractors.
fn outer_signature(krate: &syn::Path, shell: &Shell) -> TokenStream {
    let attrs = &shell.attrs;
    let vis = &shell.vis;
    let name = &shell.inner.sig.ident;
    let generics = &shell.inner.sig.generics;
    let where_clause = &generics.where_clause;
    let req = local("__idem_req");
    let payload = local("__idem_payload");
    quote! {
        #(#attrs)*
        #vis async fn #name #generics (
            #req: #krate::__private::actix::HttpRequest,
            #payload: #krate::__private::actix::WebPayload,
        ) -> #krate::__private::actix::HttpResponse #where_clause
    }
}

impl ToTokens for Rejected {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match &self.fallback {
            Fallback::AsWritten(func) => func.to_tokens(tokens),
            Fallback::Nested(shell) => {
                let outer = outer_signature(&self.krate, shell);
                let inner = &shell.inner;
                let unnamed = unnamed_alias(shell);
                tokens.extend(quote! {
                    #outer {
                        #unnamed
                        #[allow(dead_code, unused)]
                        #inner
                        ::core::unreachable!()
                    }
                });
            }
        }
        tokens.extend(self.error.as_ref().map(syn::Error::to_compile_error));
    }
}

impl ToTokens for Model {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self.framework {
            Framework::Actix => self.actix_tokens(tokens),
            Framework::Axum => crate::expand_axum::handler(self, tokens),
        }
    }
}

impl Model {
    /// The return type's span, or the name's when the function returns `()`: where "not
    /// a response" is reported.
    pub(crate) fn return_span(&self) -> Span {
        match &self.shell.inner.sig.output {
            ReturnType::Default => self.shell.inner.sig.ident.span(),
            ReturnType::Type(_, ty) => ty.span(),
        }
    }

    fn actix_tokens(&self, tokens: &mut TokenStream) {
        let krate = &self.krate;
        let outer = outer_signature(krate, &self.shell);
        let inner = &self.shell.inner;
        let name = &inner.sig.ident;
        let req = local("__idem_req");
        let payload = local("__idem_payload");
        let prepared = local("__idem_prepared");
        let body = local("__idem_body");
        let request = local("__idem_request");
        let scope = local("__idem_scope");
        let tx = local("__idem_tx");
        let phases = local("__idem_phases");
        let policy = local("__IDEM_POLICY");
        let policy_items = policy_tokens(self, &policy);

        let Params {
            extractions,
            call_args,
            scope_value,
        } = param_tokens(self, &tx, &phases, |_, ty, at_ty| {
            // The trait's function by its qualified path, not a helper bounded by
            // `FromRequest`: the error for a type that is no extractor is then the
            // trait's, at the type, with no note about idem's helper.
            quote_spanned! {ty.span()=>
                #at_ty::__private::actix::extracted(
                    <#ty as #at_ty::__private::actix::FromRequest>::from_request(#prepared.request(), &mut #body).await
                )
            }
        });

        // Spanned at the return type, so "not a Responder" points at what the user wrote.
        let ret_span = self.return_span();
        let value = local("__idem_value");
        let value_at_return = Ident::new("__idem_value", ret_span.resolved_at(Span::mixed_site()));
        let at_ret = krate_at(krate, ret_span);
        let respond = quote_spanned! {ret_span=>
            #at_ret::__private::actix::respond(#value_at_return, &#request)
        };
        let call = quote!(#name(#(#call_args),*));
        let run = run_tokens(
            self, &prepared, &scope, &tx, &phases, &value, &call, &respond,
        );

        let prepare = if self.redis {
            quote!(#krate::__private::actix::prepare_redis)
        } else {
            let backend = &self.backend;
            quote!(#krate::__private::actix::prepare::<#backend>)
        };
        let unnamed = unnamed_alias(&self.shell);
        tokens.extend(quote! {
            #outer {
                #unnamed
                #inner

                #policy_items

                let #prepared = match #prepare(&#policy, #req, #payload).await {
                    ::core::result::Result::Ok(prepared) => prepared,
                    ::core::result::Result::Err(response) => return response,
                };
                let mut #body = #prepared.payload();
                #(#extractions)*
                let #scope = #scope_value;
                let #request = ::core::clone::Clone::clone(#prepared.request());
                #run
            }
        });
    }
}
