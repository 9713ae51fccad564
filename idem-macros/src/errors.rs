//! Errors collected across the stages, so a user sees every independent mistake in one
//! build.

/// The errors found so far, combined into one `syn::Error` (which emits each with its
/// own span).
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Every error so far, or `None` when there is none.
    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.0
    }
}
