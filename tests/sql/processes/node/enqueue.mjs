// Enqueues through pgbaton's SQL API with npm's `pg` and prints what it did as JSON:
// node enqueue.mjs DSN SCHEMA. The schema name is an identifier, quoted here.
import pg from "pg";

const [dsn, schema] = process.argv.slice(2);
const api = `"${schema.replaceAll('"', '""')}"`;
const client = new pg.Client({ connectionString: dsn });
await client.connect();
try {
  const one = await client.query(
    `SELECT ${api}.enqueue($1, $2::jsonb, queue => $3) AS id`,
    ["work", JSON.stringify({ seconds: 0 }), "default"]);
  const many = await client.query(
    `SELECT ${api}.enqueue_many($1::jsonb) AS ids`,
    [JSON.stringify([{ task: "work", args: { seconds: 0 } }, { task: "sync_work" }])]);
  let refused = null;
  try {
    await client.query(`SELECT ${api}.enqueue($1, $2::jsonb, delay => $3)`,
                       ["work", "{}", -5]);
  } catch (error) {
    refused = { code: error.code, message: error.message };
  }
  console.log(JSON.stringify({ id: Number(one.rows[0].id),
                               ids: many.rows[0].ids.map(Number), refused }));
} finally {
  await client.end();
}
