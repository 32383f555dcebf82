//! Compile-fail cases of `#[hint_policy]` and `#[worker_selection_policy]` (each message under
//! the user's token, one error per mistake) and every accepted form.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
    cases.pass("ui/pass/*.rs");
}
