//! `page` and `pageSize`, parsed strictly from the raw query string (api.md 4.5): digits only, within
//! bounds, each given at most once; anything else is 400 with a JSON string body.

use crate::error::ApiError;
use crate::read::Span;

pub const DEFAULT_PAGE_SIZE: u64 = 20;
pub const MAX_PAGE_SIZE: u64 = 100;
/// The largest page accepted: past it `page × pageSize` would not fit the signed 64-bit ranges Redis takes.
pub const MAX_PAGE: u64 = (i64::MAX as u64) / MAX_PAGE_SIZE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pagination {
    pub page: u64,
    pub page_size: u64,
}

impl Pagination {
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let (mut page, mut page_size) = (None, None);
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let (slot, max) = match name.as_ref() {
                "page" => (&mut page, MAX_PAGE),
                "pageSize" => (&mut page_size, MAX_PAGE_SIZE),
                _ => continue,
            };
            if slot.is_some() {
                return Err(ApiError::BadRequest(format!("{name} must be given at most once")));
            }
            let message = || ApiError::BadRequest(format!("{name} must be an integer from 1 to {max}"));
            *slot = Some(integer(&value, max).ok_or_else(message)?);
        }
        Ok(Self { page: page.unwrap_or(1), page_size: page_size.unwrap_or(DEFAULT_PAGE_SIZE) })
    }

    /// The zero-based index of the first item of the page.
    pub fn start(&self) -> u64 {
        (self.page - 1) * self.page_size
    }

    /// The zero-based index of the last item of the page.
    pub fn stop(&self) -> u64 {
        self.start() + self.page_size - 1
    }

    /// The items of the page.
    pub fn span(&self) -> Span {
        Span { start: self.start(), stop: self.stop() }
    }
}

/// A decimal integer from 1 to `max`, written with digits only.
fn integer(value: &str, max: u64) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u64>().ok().filter(|n| (1..=max).contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<Pagination, String> {
        Pagination::parse(Some(query)).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_page_one_of_twenty() {
        assert_eq!(Pagination::parse(None).unwrap(), Pagination { page: 1, page_size: 20 });
        assert_eq!(parse("other=x").unwrap(), Pagination { page: 1, page_size: 20 });
    }

    #[test]
    fn bounds_are_inclusive() {
        assert_eq!(parse("page=1&pageSize=1").unwrap(), Pagination { page: 1, page_size: 1 });
        assert_eq!(parse("page=7&pageSize=100").unwrap(), Pagination { page: 7, page_size: 100 });
        assert_eq!(parse("page=007").unwrap().page, 7);
    }

    #[test]
    fn anything_else_is_rejected() {
        for query in [
            "page=0",
            "page=-1",
            "page=",
            "page=1.0",
            "page=1e3",
            "page=+1",
            "page= 1",
            "page=abc",
            "page=%31%00",
            "pageSize=0",
            "pageSize=101",
            "pageSize=",
            "pageSize=20.5",
            "pageSize=99999999999999999999999",
            "page=99999999999999999999999",
            "page=1&page=2",
            "pageSize=5&pageSize=5",
            "page",
        ] {
            assert!(parse(query).is_err(), "{query} was accepted");
        }
    }

    #[test]
    fn the_message_names_the_parameter() {
        assert!(parse("pageSize=0").unwrap_err().contains("pageSize"));
        assert!(parse("page=0").unwrap_err().starts_with("page must"));
    }

    #[test]
    fn the_largest_page_still_has_a_valid_range() {
        let last = parse(&format!("page={MAX_PAGE}&pageSize=100")).unwrap();
        assert!(last.stop() <= i64::MAX as u64);
        assert!(parse(&format!("page={}", MAX_PAGE + 1)).is_err());
    }
}
