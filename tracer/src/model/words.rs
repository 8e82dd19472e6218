//! Small pieces of English every report uses.

/// `one` for 1, else `many`.
pub fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}
