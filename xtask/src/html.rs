//! Just enough HTML reading for the book's link check and the browser check: the tags of a
//! page with their attributes, and the text between two tags. mdBook writes well-formed HTML
//! and Chromium's `--dump-dom` serialises a DOM, so a small scanner is enough; text nodes
//! never hold a raw `<`, and the raw text of `<script>` and `<style>` is skipped.

/// One start or end tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// Lower-case tag name, without the `/` of an end tag.
    pub name: String,
    pub end_tag: bool,
    /// Attribute name (lower case) and decoded value, in source order.
    pub attrs: Vec<(String, String)>,
    /// Byte offset of the `<`.
    pub start: usize,
    /// Byte offset just past the `>`.
    pub end: usize,
}

impl Tag {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// Whether the `class` attribute lists `class`.
    pub fn has_class(&self, class: &str) -> bool {
        self.attr("class")
            .is_some_and(|classes| classes.split_whitespace().any(|c| c == class))
    }

    pub fn is_start(&self, name: &str) -> bool {
        !self.end_tag && self.name == name
    }
}

/// Every tag of `html`, in order.
pub fn tags(html: &str) -> Vec<Tag> {
    let bytes = html.as_bytes();
    let mut tags = Vec::new();
    let mut at = 0;
    while let Some(offset) = html[at..].find('<') {
        let start = at + offset;
        let rest = &html[start..];
        if rest.starts_with("<!--") {
            at = rest
                .find("-->")
                .map_or(html.len(), |close| start + close + 3);
            continue;
        }
        let (end_tag, name_start) = match bytes.get(start + 1) {
            Some(b'/') => (true, start + 2),
            Some(b'!' | b'?') => {
                at = rest.find('>').map_or(html.len(), |close| start + close + 1);
                continue;
            }
            _ => (false, start + 1),
        };
        let name_end = html[name_start..]
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '-')
            .map_or(html.len(), |len| name_start + len);
        if name_end == name_start
            || !bytes[name_start].is_ascii_alphabetic()
            || name_end == html.len()
        {
            at = start + 1;
            continue;
        }
        let name = html[name_start..name_end].to_ascii_lowercase();
        let (attrs, end) = attributes(html, name_end);
        let raw_text = !end_tag && (name == "script" || name == "style");
        tags.push(Tag {
            name: name.clone(),
            end_tag,
            attrs,
            start,
            end,
        });
        at = end;
        if raw_text {
            let close = format!("</{name}");
            let lower = html[end..].to_ascii_lowercase();
            at = lower.find(&close).map_or(html.len(), |len| end + len);
        }
    }
    tags
}

/// Parses attributes from `at` to the tag's `>`; returns them and the offset past the `>`.
fn attributes(html: &str, mut at: usize) -> (Vec<(String, String)>, usize) {
    let bytes = html.as_bytes();
    let mut attrs = Vec::new();
    loop {
        while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b'/') {
            at += 1;
        }
        if at >= bytes.len() {
            return (attrs, html.len());
        }
        if bytes[at] == b'>' {
            return (attrs, at + 1);
        }
        let name_end = html[at..]
            .find(|c: char| c.is_ascii_whitespace() || matches!(c, '=' | '>' | '/'))
            .map_or(html.len(), |len| at + len);
        let name = html[at..name_end].to_ascii_lowercase();
        at = name_end;
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let mut value = String::new();
        if bytes.get(at) == Some(&b'=') {
            at += 1;
            while at < bytes.len() && bytes[at].is_ascii_whitespace() {
                at += 1;
            }
            match bytes.get(at) {
                Some(&quote @ (b'"' | b'\'')) => {
                    let close = html[at + 1..]
                        .find(quote as char)
                        .map_or(html.len(), |len| at + 1 + len);
                    value = decode_entities(&html[at + 1..close]);
                    at = (close + 1).min(html.len());
                }
                _ => {
                    let close = html[at..]
                        .find(|c: char| c.is_ascii_whitespace() || c == '>')
                        .map_or(html.len(), |len| at + len);
                    value = decode_entities(&html[at..close]);
                    at = close;
                }
            }
        }
        if !name.is_empty() {
            attrs.push((name, value));
        }
    }
}

/// The visible text between two byte offsets: tags removed, entities decoded.
pub fn text(html: &str, from: usize, to: usize) -> String {
    let slice = &html[from..to];
    let mut out = String::new();
    let mut at = 0;
    for tag in tags(slice) {
        out.push_str(&slice[at..tag.start]);
        at = tag.end;
    }
    out.push_str(&slice[at.min(slice.len())..]);
    decode_entities(&out)
}

/// The offset of the end tag that closes the start tag `tags[open]`, counting nesting.
pub fn closing(tags: &[Tag], open: usize) -> Option<usize> {
    let name = &tags[open].name;
    let mut depth = 0usize;
    for (index, tag) in tags.iter().enumerate().skip(open) {
        if &tag.name != name {
            continue;
        }
        if tag.end_tag {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(index);
            }
        } else {
            depth += 1;
        }
    }
    None
}

/// Decodes the character references mdBook and Chromium write.
pub fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest.find(';').filter(|&semi| semi <= 10).and_then(|semi| {
            let entity = &rest[1..semi];
            let ch = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .map(|hex| u32::from_str_radix(hex, 16))
                    .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                    .and_then(Result::ok)
                    .and_then(char::from_u32),
            };
            ch.map(|ch| (ch, semi + 1))
        });
        match decoded {
            Some((ch, len)) => {
                out.push(ch);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tags_attributes_and_skips_script_text() {
        let html = r#"<p class="a b" id='x'>1 &lt; 2</p><script>if (a<b) { x = "<a href='no'>"; }</script><a href="06.html#%E4&amp;b">t</a><!-- <a href="c"> -->"#;
        let tags = tags(html);
        let names: Vec<(&str, bool)> = tags.iter().map(|t| (t.name.as_str(), t.end_tag)).collect();
        assert_eq!(
            names,
            [
                ("p", false),
                ("p", true),
                ("script", false),
                ("script", true),
                ("a", false),
                ("a", true)
            ]
        );
        assert!(tags[0].has_class("b"));
        assert_eq!(tags[0].attr("id"), Some("x"));
        assert_eq!(tags[4].attr("href"), Some("06.html#%E4&b"));
        assert_eq!(text(html, tags[0].end, tags[1].start), "1 < 2");
        assert_eq!(closing(&tags, 0), Some(1));
    }

    #[test]
    fn decodes_numeric_and_named_references() {
        assert_eq!(
            decode_entities("&#x4e0d;&#21464;&quot;&amp;x&unknown"),
            "不变\"&x&unknown"
        );
    }
}
