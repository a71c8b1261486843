// Writes to idem's outbox on PostgreSQL from Node.js, with node-postgres (`pg`), as
// `Outbox::enqueue` does.
//
//     node pg_writer.mjs POSTGRES_URL SCHEMA < plan.json
//
// The outbox is SCHEMA.idem_outbox, the business table SCHEMA.orders. The plan and the output
// are those of the Python writers (outbox_plan.py): JSON transactions on standard input, each
// message's id printed on its own line.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";

// outbox_enqueue.sql's statement: the row, its `seq` from the outbox's sequence, both times the
// statement's, and a notification the relays get when the transaction commits.
const enqueueStatement = (schema) => `
WITH enqueued AS (
    INSERT INTO "${schema}".idem_outbox (
        id, seq, destination, ordering_key, header_names, header_values, payload,
        state, available_at, enqueued_at
    )
    VALUES (
        $1, nextval('"${schema}".idem_outbox_seq'), $2, $3, $4::text[], $5::text[], $6,
        'pending', statement_timestamp(), statement_timestamp()
    )
    RETURNING id
)
SELECT pg_notify($7, '') FROM enqueued`;

// A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits.
function uuid7() {
  const bytes = randomBytes(16);
  bytes.writeUIntBE(Date.now(), 0, 6);
  bytes[6] = (bytes[6] & 0x0f) | 0x70; // version 7
  bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant 0b10
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// The channel relays listen on: `idem_outbox_` and the 64-bit FNV-1a hash of `schema.table`.
function notifyChannel(schema, table = "idem_outbox") {
  let digest = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(`${schema}.${table}`)) {
    digest = ((digest ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return `idem_outbox_${digest.toString(16).padStart(16, "0")}`;
}

async function enqueue(client, schema, message) {
  const id = uuid7();
  await client.query(enqueueStatement(schema), [
    id,
    message.destination,
    message.ordering_key,
    message.headers.map(([name]) => name),
    message.headers.map(([, value]) => value),
    Buffer.from(message.payload, "base64"), // a Buffer: bytea
    notifyChannel(schema),
  ]);
  console.log(id);
}

const [url, schema] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(0, "utf8"));
const client = new pg.Client({ connectionString: url });
await client.connect();
try {
  for (const transaction of plan) {
    await client.query("BEGIN");
    try {
      await client.query(`INSERT INTO "${schema}".orders (id, state) VALUES ($1, $2)`, [
        transaction.order,
        transaction.state,
      ]);
      for (const message of transaction.messages) {
        await enqueue(client, schema, message);
      }
    } catch (error) {
      await client.query("ROLLBACK");
      throw error;
    }
    await client.query(transaction.commit ? "COMMIT" : "ROLLBACK");
  }
} finally {
  await client.end();
}
