//! `page` and `pageSize`, parsed strictly from the raw query string (api.md 4.5): digits only, within
//! bounds, each given at most once; anything else is 400 with a JSON string body. A page links to the
//! first, previous, next and last pages in its `Link` header ([`Pagination::links`]).
//!
//! `page` has no upper bound but that of its type (api.md 8 gives it none): any 64-bit integer from 1 is a
//! page, and a page past the last one is answered with no items, as the rules of 4.5 expect of a client
//! that reads on.

use crate::error::ApiError;
use crate::read::Span;

pub const DEFAULT_PAGE_SIZE: u64 = 20;
pub const MAX_PAGE_SIZE: u64 = 100;
/// The largest page accepted: the largest signed 64-bit integer, the `int64` the OpenAPI document gives
/// `page`. Pages whose items would lie past the ranges Redis takes read the end of the list: no items.
pub const MAX_PAGE: u64 = i64::MAX as u64;
/// The largest index a Redis range takes.
const MAX_INDEX: u64 = i64::MAX as u64;

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

    /// The zero-based index of the first item of the page; for a page that far past any list, the
    /// largest index Redis takes, past the end of every list.
    pub fn start(&self) -> u64 {
        (self.page - 1).saturating_mul(self.page_size).min(MAX_INDEX)
    }

    /// The zero-based index of the last item of the page, no larger than the largest index Redis takes.
    pub fn stop(&self) -> u64 {
        self.start().saturating_add(self.page_size - 1).min(MAX_INDEX)
    }

    /// The items of the page.
    pub fn span(&self) -> Span {
        Span { start: self.start(), stop: self.stop() }
    }

    /// The last page of `total` items: 1 when there are none.
    pub fn last(&self, total: u64) -> u64 {
        total.div_ceil(self.page_size).max(1)
    }

    /// The `Link` header of this page of `total` items (RFC 8288): `first`, `prev` (but on page 1),
    /// `next` (but on the last page or past it) and `last`, each the request's own path and query with
    /// `page` and `pageSize` set (the page size in use, even when the request left it to the default) and
    /// the other parameters kept. `prev` of a page past the last is the last.
    pub fn links(&self, path: &str, query: Option<&str>, total: u64) -> String {
        let others: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .filter(|(name, _)| name != "page" && name != "pageSize")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        // A path as the request gave it, but for what cannot stand between the brackets.
        let path = path.replace('<', "%3C").replace('>', "%3E");
        let target = |page: u64| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("page", &page.to_string()).append_pair("pageSize", &self.page_size.to_string());
            query.extend_pairs(&others);
            format!("<{path}?{}>", query.finish())
        };
        let last = self.last(total);
        let mut links = vec![(target(1), "first")];
        if self.page > 1 {
            links.push((target((self.page - 1).min(last)), "prev"));
        }
        if self.page < last {
            links.push((target(self.page + 1), "next"));
        }
        links.push((target(last), "last"));
        links.iter().map(|(target, rel)| format!("{target}; rel=\"{rel}\"")).collect::<Vec<_>>().join(", ")
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

    fn links(query: &str, total: u64) -> Vec<String> {
        let page = parse(query).unwrap();
        page.links("/v1/studies", Some(query), total).split(", ").map(String::from).collect()
    }

    #[test]
    fn a_middle_page_links_to_the_first_the_previous_the_next_and_the_last() {
        assert_eq!(
            links("page=3&pageSize=10", 95),
            [
                "</v1/studies?page=1&pageSize=10>; rel=\"first\"",
                "</v1/studies?page=2&pageSize=10>; rel=\"prev\"",
                "</v1/studies?page=4&pageSize=10>; rel=\"next\"",
                "</v1/studies?page=10&pageSize=10>; rel=\"last\"",
            ]
        );
    }

    #[test]
    fn the_first_page_has_no_prev_and_the_last_no_next() {
        let first = links("", 45);
        assert_eq!(
            first,
            [
                "</v1/studies?page=1&pageSize=20>; rel=\"first\"",
                "</v1/studies?page=2&pageSize=20>; rel=\"next\"",
                "</v1/studies?page=3&pageSize=20>; rel=\"last\"",
            ],
            "the default page size is written out"
        );
        let last = links("page=3", 45);
        assert_eq!(last[1], "</v1/studies?page=2&pageSize=20>; rel=\"prev\"");
        assert_eq!(last.len(), 3);
        assert!(last[2].ends_with("page=3&pageSize=20>; rel=\"last\""));
        assert_eq!(links("pageSize=5", 5).len(), 2, "one full page: first and last");
    }

    #[test]
    fn an_empty_list_is_one_page_and_a_page_past_the_last_goes_back_to_it() {
        let empty = links("", 0);
        assert_eq!(
            empty,
            ["</v1/studies?page=1&pageSize=20>; rel=\"first\"", "</v1/studies?page=1&pageSize=20>; rel=\"last\""]
        );
        let past = links("page=9&pageSize=10", 25);
        assert_eq!(past[1], "</v1/studies?page=3&pageSize=10>; rel=\"prev\"");
        assert_eq!(past.len(), 3, "no next");
    }

    #[test]
    fn links_keep_the_other_parameters_and_the_path() {
        let page = parse("q=a%20b&page=2&pageSize=5&x").unwrap();
        let header = page.links("/v1/studies/s%2F1/interviews", Some("q=a%20b&page=2&pageSize=5&x"), 20);
        assert!(
            header.starts_with("</v1/studies/s%2F1/interviews?page=1&pageSize=5&q=a+b&x=>; rel=\"first\""),
            "{header}"
        );
        assert!(Pagination::parse(None).unwrap().links("/a<b>", None, 0).starts_with("</a%3Cb%3E?page=1"));
    }

    #[test]
    fn the_largest_page_still_has_a_valid_range() {
        let last = parse(&format!("page={MAX_PAGE}&pageSize=100")).unwrap();
        assert_eq!(last.page, 9_223_372_036_854_775_807, "any int64 from 1 is a page");
        assert!(last.start() <= last.stop() && last.stop() <= i64::MAX as u64);
        assert!(parse(&format!("page={}", MAX_PAGE + 1)).is_err());
        assert_eq!(
            parse(&format!("page={}", MAX_PAGE + 1)).unwrap_err(),
            "page must be an integer from 1 to 9223372036854775807"
        );
    }

    #[test]
    fn a_page_far_past_any_list_reads_past_its_end() {
        // The first page whose items lie beyond the largest index Redis takes, and pages far beyond it.
        let beyond = MAX_INDEX / 100 + 2;
        for query in [
            format!("page={beyond}&pageSize=100"),
            format!("page={MAX_PAGE}&pageSize=100"),
            format!("page={MAX_PAGE}&pageSize=2"),
        ] {
            let page = parse(&query).unwrap();
            assert_eq!((page.start(), page.stop()), (MAX_INDEX, MAX_INDEX), "{query}");
        }
        // Below it, the range is the page's own.
        let page = parse(&format!("page={}&pageSize=100", MAX_INDEX / 100)).unwrap();
        assert_eq!(page.start(), (MAX_INDEX / 100 - 1) * 100);
        assert_eq!(page.stop(), page.start() + 99);
    }

    #[test]
    fn a_page_far_past_the_last_links_back_to_the_last() {
        let header = links(&format!("page={MAX_PAGE}&pageSize=10"), 25);
        assert_eq!(header[1], "</v1/studies?page=3&pageSize=10>; rel=\"prev\"");
        assert_eq!(header.len(), 3, "no next");
    }
}
