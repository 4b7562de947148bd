//! The participant's display name: first name and the first user-perceived character of the last name.

use unicode_segmentation::UnicodeSegmentation;

/// `"Ada L."` from `Ada` and `Lovelace`; the first name alone without a last name; `None` without a first name.
/// The first name is used as given (events.md: null only when null or empty); a last name of nothing but
/// whitespace has no first character worth showing and counts as empty.
pub fn display_name(first: Option<&str>, last: Option<&str>) -> Option<String> {
    let first = first.filter(|f| !f.is_empty())?;
    match last.map(str::trim).and_then(|l| l.graphemes(true).next()) {
        Some(initial) => Some(format!("{first} {initial}.")),
        None => Some(first.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::display_name;

    #[test]
    fn first_name_and_last_initial() {
        assert_eq!(display_name(Some("Ada"), Some("Lovelace")).as_deref(), Some("Ada L."));
    }

    #[test]
    fn the_initial_is_a_whole_grapheme() {
        assert_eq!(display_name(Some("Jón"), Some("Ólafur")).as_deref(), Some("Jón Ó."));
        // "O" followed by a combining acute accent is one user-perceived character.
        assert_eq!(display_name(Some("Jón"), Some("O\u{301}lafur")).as_deref(), Some("Jón O\u{301}."));
        // A flag is two code points and one grapheme; so is a family emoji with joiners.
        assert_eq!(display_name(Some("Iva"), Some("🇮🇸land")).as_deref(), Some("Iva 🇮🇸."));
        assert_eq!(display_name(Some("Ana"), Some("👨‍👩‍👧x")).as_deref(), Some("Ana 👨‍👩‍👧."));
        assert_eq!(display_name(Some("Li"), Some("王小明")).as_deref(), Some("Li 王."));
    }

    #[test]
    fn first_name_alone_when_the_last_name_is_missing_or_empty() {
        assert_eq!(display_name(Some("Ada"), None).as_deref(), Some("Ada"));
        assert_eq!(display_name(Some("Ada"), Some("")).as_deref(), Some("Ada"));
        assert_eq!(display_name(Some("Ada"), Some("  ")).as_deref(), Some("Ada"));
    }

    #[test]
    fn the_first_name_is_used_as_given() {
        assert_eq!(display_name(Some(" Ada "), Some("Lovelace")).as_deref(), Some(" Ada  L."));
        assert_eq!(display_name(Some("  "), None).as_deref(), Some("  "));
    }

    #[test]
    fn no_name_without_a_first_name() {
        assert_eq!(display_name(None, Some("Lovelace")), None);
        assert_eq!(display_name(Some(""), Some("Lovelace")), None);
        assert_eq!(display_name(None, None), None);
    }
}
