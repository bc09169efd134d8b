//! `/`-separated paths, as links in Markdown sources and in the built site write them.

/// `dir` joined with the relative `path`, `.` and `..` resolved; `None` above the root.
pub fn normalize(dir: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|part| !part.is_empty()).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// The directory part of a `/`-separated path.
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

pub fn is_external(link: &str) -> bool {
    link.contains("://")
        || link.starts_with("//")
        || ["mailto:", "data:", "javascript:", "tel:"]
            .iter()
            .any(|scheme| link.starts_with(scheme))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_and_never_climb_above_the_root() {
        assert_eq!(
            normalize("chapters/06-tool-contract", "../STYLE.md").as_deref(),
            Some("chapters/STYLE.md")
        );
        assert_eq!(
            normalize("", "./a/./b/../c.html").as_deref(),
            Some("a/c.html")
        );
        assert_eq!(normalize("a", "../../x"), None);
        assert_eq!(parent("a/b/c.html"), "a/b");
        assert_eq!(parent("index.html"), "");
        assert!(is_external("https://example.org/x.md"));
        assert!(is_external("mailto:someone@example.org"));
        assert!(!is_external("06.html#小结"));
    }
}
