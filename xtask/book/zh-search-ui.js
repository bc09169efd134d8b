// The search box of the course book in Chinese.
//
// mdBook 0.5.4's searcher writes its results header in English ("3 search results for
// 'x':"), and its template's search box says "Search this book ...". This file, loaded from
// the page <head> (theme/head.hbs), puts both into Chinese: the placeholder once the page is
// parsed, the header every time the searcher rewrites it. The English wording it recognises
// is mdBook 0.5.4's; the browser check of `cargo xtask book --check-browser` fails if a new
// mdBook writes something else.
(function () {
    'use strict';

    const FOUND = /^(\d+) search results? for '(.*)':$/s;
    const NONE = /^No search results for '(.*)'\.$/s;

    function chinese(english) {
        let match = FOUND.exec(english);
        if (match) {
            return `找到 ${match[1]} 条包含“${match[2]}”的结果：`;
        }
        match = NONE.exec(english);
        if (match) {
            return `没有找到包含“${match[1]}”的内容。`;
        }
        return null;
    }

    function translate(header) {
        const text = chinese(header.textContent);
        if (text !== null) {
            header.textContent = text;
        }
    }

    document.addEventListener('DOMContentLoaded', () => {
        const bar = document.getElementById('mdbook-searchbar');
        if (bar) {
            bar.placeholder = '搜索本书……';
            bar.setAttribute('aria-label', '搜索本书');
        }
        const header = document.getElementById('mdbook-searchresults-header');
        if (header) {
            translate(header);
            new MutationObserver(() => translate(header))
                .observe(header, {childList: true, characterData: true, subtree: true});
        }
    });
})();
