// A client nobody here wrote, typed from the OpenAPI document alone:
// openapi-typescript makes meter-api.d.ts from api/openapi.json, openapi-fetch
// sends the requests, and tsc --strict checks this file against those types
// before it runs. Against a live meter-api: the worked example, an account
// and a sandbox, the quota check, the usage and the invoice, and a refusal
// read as a problem. Throws (exit 1) on any answer that is not as typed and
// as expected.
import createClient from "openapi-fetch";
import type { paths, components } from "./meter-api.js";

declare const process: { env: Record<string, string | undefined>; pid: number };

const base = process.env.METER_URL;
const key = process.env.METER_KEY;
if (!base || !key) throw new Error("METER_URL and METER_KEY must be set");
const api = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${key}` } });

function expect(what: string, ok: boolean): void {
  if (!ok) throw new Error(`typed client: ${what}`);
  console.log(`ok  ${what}`);
}

const rates = await api.GET("/v1/rates", { params: { query: { vcpus: "2", memory_gib: "4" } } });
const busy: string | undefined = rates.data?.busy_per_hour;
expect("the rates of 2 vCPU and 4 GiB: busy $0.08 an hour", busy === "0.08");

const est = await api.POST("/v1/estimates", {
  body: { runs_per_month: 300, minutes_per_run: 6, vcpus: 2, memory_gib: 4, avg_busy_vcpus: 0.5 },
});
const lines: components["schemas"]["EstimateLine"][] = est.data?.lines ?? [];
expect("the worked example: $1.28 (exact 1.275), two lines", est.data?.total === "1.28" &&
  est.data?.total_exact === "1.275" && lines.length === 2);

const id = `typed-${process.pid}`;
const acct = await api.POST("/v1/accounts", { body: { id, name: "Typed client", plan: "paid" } });
const plan: "trial" | "paid" | undefined = acct.data?.plan;
expect("an account made (201)", acct.response.status === 201 && plan === "paid");

const sb = await api.POST("/v1/sandboxes", {
  body: { id: `${id}-sb`, account_id: id, vcpus: "1", memory_gib: "2" },
});
const status: "running" | "stopped" | undefined = sb.data?.status;
expect("a sandbox registered, running", sb.response.status === 201 && status === "running");

const q = await api.POST("/v1/quota/check", { body: { account_id: id, vcpus: 1, memory_gib: 1 } });
const allowed: boolean | undefined = q.data?.allowed;
const running: number | undefined = q.data?.running;
expect("the quota check allows one more (1 running)", allowed === true && running === 1);

const month = new Date().toISOString().slice(0, 7);
const inv = await api.GET("/v1/accounts/{id}/invoices/{month}", { params: { path: { id, month } } });
// JSON by default; the same route answers CSV or HTML (strings) on ?format=
const doc = typeof inv.data === "object" ? inv.data : undefined;
const invStatus: "draft" | "final" | undefined = doc?.status;
expect(`the invoice of ${month}: a draft with a total`, invStatus === "draft" &&
  typeof doc?.total === "string");

const from = `${month}-01T00:00:00Z`;
const to = new Date(Date.now() + 3600e3).toISOString().slice(0, 13) + ":00:00Z";
const usage = await api.GET("/v1/accounts/{id}/usage", {
  params: { path: { id }, query: { from, to, limit: 10 } },
});
const count: number | undefined = usage.data?.sandbox_count;
expect("the account's usage: a page, its cursor null", typeof count === "number" &&
  usage.data?.next_cursor === null);

const bad = await api.POST("/v1/accounts", { body: { name: "", plan: "paid" } });
const problem: components["schemas"]["Problem"] | undefined = bad.error;
expect("a refusal is a problem with its status", problem !== undefined &&
  problem.status === bad.response.status && bad.response.status >= 400);
