// Layout probe of the course book's browser check (xtask/src/book/in_browser.rs). It is not
// part of the book: the check puts it at the end of each page of a copy of the site, and
// Chromium's --dump-dom then carries what it measured, as JSON in <pre id="layout-probe">.
//
// Measured, in the window the check opens (1280 CSS pixels wide):
// - the page: is it wider than the window (a horizontal scroll of the whole page)?
// - every table of the content: its box, whether the box scrolls, which columns do not fit
//   in the box, and whether the cells of the first two columns are on screen and not covered
//   by anything (the sidebar, say);
// - every code block that draws with box-drawing characters: each line's width against the
//   width its characters take in a terminal (wide characters two columns, others one).
(function () {
    'use strict';

    const BOX_DRAWING = /[\u2500-\u257f]/;
    const KEY_COLUMNS = 2;

    // East Asian Wide and Fullwidth characters: two columns in a terminal.
    function isWide(code) {
        return (code >= 0x1100 && code <= 0x115f)
            || (code >= 0x2e80 && code <= 0x303e)
            || (code >= 0x3041 && code <= 0x33ff)
            || (code >= 0x3400 && code <= 0x4dbf)
            || (code >= 0x4e00 && code <= 0x9fff)
            || (code >= 0xa000 && code <= 0xa4cf)
            || (code >= 0xac00 && code <= 0xd7a3)
            || (code >= 0xf900 && code <= 0xfaff)
            || (code >= 0xfe30 && code <= 0xfe4f)
            || (code >= 0xff00 && code <= 0xff60)
            || (code >= 0xffe0 && code <= 0xffe6)
            || (code >= 0x20000 && code <= 0x3fffd);
    }

    function columns(line) {
        let count = 0;
        for (const character of line) {
            count += isWide(character.codePointAt(0)) ? 2 : 1;
        }
        return count;
    }

    // The advance width of `text` set in the font of `container`.
    function textWidth(container, text) {
        const span = document.createElement('span');
        span.textContent = text;
        container.appendChild(span);
        const width = span.getBoundingClientRect().width;
        span.remove();
        return width;
    }

    function diagrams(content) {
        const found = [];
        for (const code of content.querySelectorAll('pre > code')) {
            const text = code.textContent;
            if (!BOX_DRAWING.test(text)) {
                continue;
            }
            const unit = textWidth(code, '0'.repeat(20)) / 20;
            const lines = text.replace(/\n$/, '').split('\n').map(line => ({
                text: line,
                columns: columns(line),
                width: textWidth(code, line),
            }));
            found.push({font: getComputedStyle(code).fontFamily, unit: unit, lines: lines});
        }
        return found;
    }

    // Whether the middle of `cell` can be seen: inside the window once scrolled to vertically,
    // and the topmost thing there is the cell itself.
    function onScreen(cell) {
        const before = cell.getBoundingClientRect();
        window.scrollTo(0, window.scrollY + before.top - window.innerHeight / 2);
        const rect = cell.getBoundingClientRect();
        const x = rect.left + rect.width / 2;
        const y = rect.top + rect.height / 2;
        if (rect.width === 0 || x < 0 || x >= window.innerWidth || y < 0 || y >= window.innerHeight) {
            return false;
        }
        const hit = document.elementFromPoint(x, y);
        return hit !== null && (hit === cell || cell.contains(hit));
    }

    function tables(content) {
        return Array.from(content.querySelectorAll('table')).map(table => {
            const box = table.closest('.table-wrapper') || table.parentElement;
            const boxRect = box.getBoundingClientRect();
            const rows = Array.from(table.rows);
            const header = rows.length > 0 ? Array.from(rows[0].cells) : [];
            // A column is hidden when its header cell does not fit in the box: it can only be
            // seen by scrolling the box sideways.
            const hiddenColumns = header.filter(cell => {
                const rect = cell.getBoundingClientRect();
                return rect.left < boxRect.left - 1 || rect.right > boxRect.right + 1;
            });
            const keyCells = rows.flatMap(row => Array.from(row.cells).slice(0, KEY_COLUMNS));
            const hiddenKeyCells = keyCells.filter(cell => !onScreen(cell));
            return {
                header: header.map(cell => cell.textContent.trim()).join(' | '),
                boxRight: boxRect.right,
                boxWidth: box.clientWidth,
                tableWidth: table.getBoundingClientRect().width,
                boxScrolls: ['auto', 'scroll'].includes(getComputedStyle(box).overflowX),
                hiddenColumns: hiddenColumns.map(cell => cell.textContent.trim()),
                hiddenKeyCells: hiddenKeyCells.map(cell => cell.textContent.trim()),
            };
        });
    }

    function measure() {
        const content = document.querySelector('main') || document.body;
        const report = {
            window: window.innerWidth,
            page: document.documentElement.scrollWidth,
            cjkMonoFont: document.fonts.check('16px "Noto Sans Mono CJK SC"', '中'),
            diagrams: diagrams(content),
            tables: tables(content),
        };
        window.scrollTo(0, 0);
        const out = document.createElement('pre');
        out.id = 'layout-probe';
        out.hidden = true;
        out.textContent = JSON.stringify(report);
        document.body.appendChild(out);
    }

    window.addEventListener('load', () => {
        document.fonts.ready.then(() => setTimeout(measure, 0));
    });
})();
