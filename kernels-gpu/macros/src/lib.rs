//! `#[kernel]`: the attribute that marks a GPU entry point, with Rust-CUDA `cuda_std`'s rules,
//! implemented for stock rustc's NVPTX backend.
//!
//! Rules (same as `cuda_std::kernel`):
//! - the function must be `unsafe` (a kernel dereferences raw device pointers and races by design),
//! - every parameter must be `Copy` (it is copied into the kernel parameter space),
//! - no return value, no generics, no `async`/`const`.
//!
//! Expansion: on `target_arch = "nvptx64"` the function becomes `#[no_mangle] extern "gpu-kernel"`,
//! so it is exported from the PTX under its own name. On any other target it stays an ordinary
//! `unsafe fn`, so the crate (and its unit tests) still compile for the host, as with cuda_std.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, spanned::Spanned, Error, FnArg, ItemFn, ReturnType};

#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return Error::new(attr.span(), "#[kernel] takes no arguments").to_compile_error().into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(func) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(func: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &func.sig;
    if sig.unsafety.is_none() {
        return Err(Error::new(sig.fn_token.span(), "kernels must be declared `unsafe fn`"));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return Err(Error::new(ty.span(), "kernels cannot return a value"));
    }
    if !sig.generics.params.is_empty() {
        return Err(Error::new(sig.generics.span(), "kernels cannot be generic"));
    }
    if let Some(a) = &sig.asyncness {
        return Err(Error::new(a.span(), "kernels cannot be async"));
    }
    if let Some(c) = &sig.constness {
        return Err(Error::new(c.span(), "kernels cannot be const"));
    }
    if let Some(abi) = &sig.abi {
        return Err(Error::new(abi.span(), "#[kernel] sets the ABI itself; remove `extern`"));
    }
    let mut param_types = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => return Err(Error::new(r.span(), "kernels cannot take self")),
            FnArg::Typed(pat) => param_types.push(pat.ty.clone()),
        }
    }

    let attrs = &func.attrs;
    let vis = &func.vis;
    let ident = &sig.ident;
    let inputs = &sig.inputs;
    let body = &func.block;
    let check_name = quote::format_ident!("__kernel_params_are_copy_{}", ident);

    Ok(quote! {
        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #vis unsafe extern "gpu-kernel" fn #ident(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #(#attrs)*
        #[allow(dead_code, clippy::too_many_arguments)]
        #vis unsafe fn #ident(#inputs) #body

        #[allow(non_snake_case, dead_code)]
        fn #check_name() {
            fn assert_copy<T: ::core::marker::Copy>() {}
            #( assert_copy::<#param_types>(); )*
        }
    })
}
