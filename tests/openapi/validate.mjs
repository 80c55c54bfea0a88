// Checks recorded exchanges of the test suite against the OpenAPI document:
// every request names a documented operation, every answer's status is one
// it declares, and every JSON answer validates against the declared schema
// (Ajv, JSON Schema 2020-12, which OpenAPI 3.1 uses).
//
//   node tests/openapi/validate.mjs api/openapi.json EXCHANGES.jsonl...
//
// The exchanges come from tests/support/http.c (METER_HTTP_RECORD). A line
// {"webhook": TYPE, "body": ...} is a webhook a test's receiver got: its body
// must validate against the document's webhooks.TYPE request body. Exits 1
// on any mismatch, or when the files hold no exchange at all.
import fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [docPath, ...files] = process.argv.slice(2);
const doc = JSON.parse(fs.readFileSync(docPath, 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
addFormats(ajv);
ajv.addSchema({ $id: 'meter-openapi', components: doc.components });

// "#/components/..." inside a schema taken out of the document points into it.
const rebase = (v) => Array.isArray(v) ? v.map(rebase)
  : v && typeof v === 'object'
    ? Object.fromEntries(Object.entries(v).map(([k, x]) =>
        [k, k === '$ref' && typeof x === 'string' && x.startsWith('#/') ? 'meter-openapi' + x : rebase(x)]))
    : v;
const deref = (r) => (r && r.$ref ? r.$ref.slice(2).split('/').reduce((o, k) => o[k], doc) : r);

const routes = Object.entries(doc.paths).map(([tpl, ops]) => ({
  tpl, ops,
  re: new RegExp('^' + tpl.replace(/[.]/g, '\\.').replace(/\{[^}]+\}/g, '[^/]+') + '$'),
}));
const compiled = new Map();
const failures = [];
const seen = new Set();
let n = 0;
let hooks = 0;
const seenHooks = new Set();
const checkHook = (x) => {
  const op = doc.webhooks && doc.webhooks[x.webhook] && doc.webhooks[x.webhook].post;
  if (!op) {
    failures.push(`webhook ${x.webhook}: not in the document's webhooks`);
    return;
  }
  seenHooks.add(x.webhook);
  const key = `webhook ${x.webhook}`;
  if (!compiled.has(key))
    compiled.set(key, ajv.compile(rebase(op.requestBody.content['application/json'].schema)));
  const check = compiled.get(key);
  if (!check(JSON.parse(x.body)))
    failures.push(`${key}: ${ajv.errorsText(check.errors, { separator: '; ' })}; body ${x.body.slice(0, 300)}`);
};
for (const file of files) {
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const x = JSON.parse(line);
    if (x.webhook !== undefined) {
      hooks++;
      checkHook(x);
      continue;
    }
    n++;
    const path = x.path.split('?')[0];
    const method = x.method.toLowerCase();
    const route = routes.find((r) => r.re.test(path));
    const op = route && route.ops[method];
    const where = `${x.method} ${x.path} -> ${x.status}`;
    if (!op) {
      // a path or method the server does not serve: its 404 or 405 is a problem
      if (![404, 405, 400, 414].includes(x.status) || !x.type.startsWith('application/problem+json'))
        failures.push(`${where}: no such operation in the document`);
      continue;
    }
    seen.add(`${method} ${route.tpl}`);
    const res = deref(op.responses[String(x.status)] || op.responses.default);
    if (!res) {
      failures.push(`${where}: status ${x.status} is not declared for ${method.toUpperCase()} ${route.tpl}`);
      continue;
    }
    const media = (x.type || '').split(';')[0].trim();
    if (!res.content) {
      if (x.body !== undefined && x.status !== 303)
        failures.push(`${where}: the document declares no body, the answer has one (${media})`);
      continue;
    }
    const mt = res.content[media];
    if (!mt) {
      failures.push(`${where}: content type ${media} is not declared (${Object.keys(res.content).join(', ')})`);
      continue;
    }
    if (!mt.schema || x.body === undefined) continue;
    const key = `${method} ${route.tpl} ${x.status} ${media}`;
    if (!compiled.has(key)) compiled.set(key, ajv.compile(rebase(mt.schema)));
    const check = compiled.get(key);
    let body;
    try {
      body = JSON.parse(x.body);
    } catch {
      failures.push(`${where}: not JSON`);
      continue;
    }
    if (!check(body))
      failures.push(`${where}: ${ajv.errorsText(check.errors, { separator: '; ' })}; body ${x.body.slice(0, 300)}`);
  }
}
const all = routes.flatMap((r) => Object.keys(r.ops).filter((m) => m !== 'parameters').map((m) => `${m} ${r.tpl}`));
const unseen = all.filter((k) => !seen.has(k));
const allHooks = Object.keys(doc.webhooks || {});
console.log(`openapi: ${n} exchanges checked, ${seen.size} of ${all.length} operations exercised; ${hooks} webhooks checked, ${seenHooks.size} of ${allHooks.length} events; ${failures.length} mismatches`);
if (unseen.length) console.log(`not exercised: ${unseen.join(', ')}`);
const unseenHooks = allHooks.filter((k) => !seenHooks.has(k));
if (unseenHooks.length) console.log(`webhooks not received: ${unseenHooks.join(', ')}`);
for (const f of failures.slice(0, 60)) console.log(`MISMATCH ${f}`);
if (failures.length > 60) console.log(`... and ${failures.length - 60} more`);
process.exit(n === 0 || failures.length ? 1 : 0);
