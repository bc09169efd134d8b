// Chinese search for the course book.
//
// mdBook 0.5.4 indexes text split at whitespace, and elasticlunr's query pipeline trims every
// non-ASCII character, so a Chinese term such as 不变量 finds nothing. The index's document
// store, however, holds the full text of every section (mdBook shows it as the result teaser).
// A query that contains Chinese or Japanese characters is therefore answered here by substring
// match over that text, with mdBook's own field boosts and AND/OR setting; every other query
// goes to elasticlunr unchanged.
//
// This file is loaded from the page <head> (theme/head.hbs), before elasticlunr.min.js. It
// patches elasticlunr the moment that script defines `window.elasticlunr`, so the patch is in
// place before searcher.js can load the index, whatever order the browser runs scripts in.
(function () {
    'use strict';

    const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]/;

    function occurrences(text, term) {
        let count = 0;
        let at = text.indexOf(term);
        while (at !== -1) {
            count += 1;
            at = text.indexOf(term, at + term.length);
        }
        return count;
    }

    function substringSearch(index, query, config) {
        const terms = query.toLowerCase().split(/\s+/).filter(term => term !== '');
        const fields = (config && config.fields) || {title: {boost: 1}, body: {boost: 1}};
        const everyTerm = !config || config.bool !== 'OR';
        const docs = index.documentStore.docs;
        const results = [];
        for (const ref of Object.keys(docs)) {
            const doc = docs[ref];
            let score = 0;
            let matched = 0;
            for (const term of terms) {
                let termScore = 0;
                for (const field of Object.keys(fields)) {
                    const boost = fields[field].boost === undefined ? 1 : fields[field].boost;
                    termScore += boost * occurrences(String(doc[field] || '').toLowerCase(), term);
                }
                if (termScore > 0) {
                    matched += 1;
                    score += termScore;
                }
            }
            if (everyTerm ? matched === terms.length : matched > 0) {
                results.push({ref: ref, score: score, doc: doc});
            }
        }
        results.sort((a, b) => b.score - a.score);
        return results;
    }

    function patch(lunr) {
        if (!lunr || !lunr.Index || lunr.Index.prototype.cjkSubstringSearch) {
            return;
        }
        const search = lunr.Index.prototype.search;
        lunr.Index.prototype.cjkSubstringSearch = true;
        lunr.Index.prototype.search = function (query, config) {
            if (typeof query === 'string' && CJK.test(query) && this.documentStore.isDocStored()) {
                return substringSearch(this, query, config);
            }
            return search.call(this, query, config);
        };
    }

    let current = window.elasticlunr;
    patch(current);
    Object.defineProperty(window, 'elasticlunr', {
        configurable: true,
        enumerable: true,
        get: () => current,
        set: value => {
            current = value;
            patch(value);
        },
    });
})();
