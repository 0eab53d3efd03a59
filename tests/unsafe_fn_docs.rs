//! Every `unsafe fn` in the repository's Rust sources says what its caller must guarantee: a
//! `# Safety` section in its doc comment. Clippy's `missing_safety_doc` checks public items only;
//! most of ours are crate-private (device code, ABI helpers). Methods of a trait implementation
//! are exempt: the trait's declaration carries the contract. The proc-macro crate's quoted code is
//! not scanned (its kernels' docs come from the macro's callers).

use std::fs;
use std::path::{Path, PathBuf};

const ROOTS: [&str; 8] =
    ["src", "host/src", "kernels-gpu/src", "tests", "benches", "fuzz/src", "fuzz/fuzz_targets", "build.rs"];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_path_buf());
        }
        return;
    }
    let Ok(entries) = fs::read_dir(path) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for entry in entries {
        rust_files(&entry, out);
    }
}

/// Whether line `i` (an `unsafe fn`) is a method of an `impl Trait for Type` block: the nearest
/// item above it that starts in column 0 is that `impl`.
fn in_trait_impl(lines: &[&str], i: usize) -> bool {
    if !lines[i].starts_with(char::is_whitespace) {
        return false;
    }
    lines[..i]
        .iter()
        .rev()
        .find(|l| !l.is_empty() && !l.starts_with(char::is_whitespace) && !l.starts_with('}') && !l.starts_with("//"))
        .is_some_and(|l| (l.starts_with("impl") || l.starts_with("unsafe impl")) && l.contains(" for "))
}

/// Whether a trimmed source line declares an `unsafe fn` (also `unsafe extern "ABI" fn`, and a
/// `macro_rules!` body's `unsafe fn $name`), after its visibility and qualifiers: not a string or a
/// comment that mentions one, nor a parameter of function-pointer type.
fn declares_unsafe_fn(code: &str) -> bool {
    let mut rest = code;
    while let Some(r) =
        ["pub(crate) ", "pub(super) ", "pub ", "const ", "async "].iter().find_map(|p| rest.strip_prefix(p))
    {
        rest = r;
    }
    let Some(rest) = rest.strip_prefix("unsafe ") else { return false };
    let rest = match rest.strip_prefix("extern \"") {
        Some(abi) => match abi.split_once("\" ") {
            Some((_, after)) => after,
            None => return false,
        },
        None => rest,
    };
    rest.strip_prefix("fn ").is_some_and(|name| name.starts_with(|c: char| c.is_alphabetic() || c == '_' || c == '$'))
}

/// The `unsafe fn`s of `text` (1-based line numbers) whose doc comment has no `# Safety` section.
fn undocumented(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !declares_unsafe_fn(line.trim_start()) || in_trait_impl(&lines, i) {
            continue;
        }
        // The doc comment and attributes right above the declaration.
        let above = lines[..i].iter().rev().take_while(|l| {
            let t = l.trim_start();
            t.starts_with("///") || t.starts_with("#[") || t.starts_with("//")
        });
        if !above.into_iter().any(|l| l.trim_start().starts_with("/// # Safety")) {
            missing.push(i + 1);
        }
    }
    missing
}

#[test]
fn the_scan_finds_what_it_should() {
    // One fixture line a source line (each with a quote, so this file's scan skips them).
    let text = [
        "/// Reads.",
        "///",
        "/// # Safety",
        "/// `p` readable.",
        "#[inline]",
        "unsafe fn a(p: *const u8) {}",
        "/// No contract.",
        "pub(crate) unsafe fn b() {}",
        "trait T {",
        "    /// # Safety",
        "    /// Never.",
        "    unsafe fn c(self);",
        "}",
        "impl T for u8 {",
        "    unsafe fn c(self) {}",
        "}",
        "impl S {",
        "    unsafe fn d(&self) {}",
        "}",
        "pub unsafe extern \"C\" fn e() {}",
        "fn f(g: unsafe extern \"C\" fn(u8)) {}",
        "let s = \"unsafe fn h()\";",
    ]
    .join("\n");
    assert_eq!(undocumented(&text), vec![8, 18, 20]);
}

#[test]
fn every_unsafe_fn_has_a_safety_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in ROOTS {
        rust_files(&root.join(r), &mut files);
    }
    assert!(files.len() > 80, "found only {} Rust files under {ROOTS:?}", files.len());
    let mut report = Vec::new();
    let mut scanned = 0;
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        scanned += text.matches("unsafe fn ").count();
        for line in undocumented(&text) {
            report.push(format!("{}:{line}", f.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(scanned > 100, "only {scanned} `unsafe fn`s found");
    assert!(report.is_empty(), "`unsafe fn`s without a `# Safety` section:\n{}", report.join("\n"));
}
