import { JSDOM } from 'jsdom';
import fs from 'fs';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window; globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });
let bad = 0;
for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f, 'utf8');
  const re = /```mermaid\n([\s\S]*?)```/g; let m; let n = 0;
  while ((m = re.exec(text))) { n++;
    try { await mermaid.parse(m[1]); } catch (e) { bad++; console.log(f, 'diagram', n, 'INVALID:', e.message.split('\n').slice(0,4).join(' | ')); }
  }
  console.log(f, n, 'diagram(s) parsed');
}
process.exit(bad ? 1 : 0);
