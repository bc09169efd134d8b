//! Reading HTML, shared by the book's link check (`book/links.rs`) and its browser check
//! (`book/in_browser.rs`): a standards-compliant parser (html5ever, through `scraper`) and CSS
//! selectors, never a hand-written tag scanner.

use html5ever::tendril::TendrilSink as _;
use scraper::{ElementRef, Html, HtmlTreeSink, Selector};

/// A CSS selector written in this crate; an invalid one is a bug.
pub fn selector(css: &str) -> Selector {
    Selector::parse(css).unwrap_or_else(|error| panic!("CSS selector `{css}`: {error}"))
}

/// A page as a browser with JavaScript on reads it (`--dump-dom` output, test fixtures).
pub fn parse(text: &str) -> Html {
    Html::parse_document(text)
}

/// A page as a browser without JavaScript reads it: with scripting off, the content of
/// `<noscript>` (mdBook's sidebar frame, `toc.html`) is markup, so its links count too.
/// (`Html::parse_document` parses with scripting on.)
pub fn parse_without_scripts(text: &str) -> Html {
    let options = html5ever::ParseOpts {
        tree_builder: html5ever::tree_builder::TreeBuilderOpts {
            scripting_enabled: false,
            ..Default::default()
        },
        ..Default::default()
    };
    html5ever::parse_document(HtmlTreeSink::new(Html::new_document()), options).one(text)
}

/// The text of an element as a reader sees it, trimmed.
pub fn text(element: ElementRef) -> String {
    element.text().collect::<String>().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripting_decides_whether_noscript_holds_markup() {
        let page = r#"<noscript><a href="toc.html">目录</a></noscript>"#;
        let links = selector("a[href]");
        assert_eq!(parse(page).select(&links).count(), 0);
        let without = parse_without_scripts(page);
        let link = without
            .select(&links)
            .next()
            .expect("the link inside <noscript>");
        assert_eq!(text(link), "目录");
    }
}
