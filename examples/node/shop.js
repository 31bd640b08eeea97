// A shop's purchases through node-postgres (npm "pg"), as docs/CLIENTS.md
// explains: after any error or timeout of seckill_buy(), the purchase may have
// been made, so the shop asks seckill_order() for its fate and never buys
// again blindly.
//
//   DATABASE_URL=postgres://... node shop.js GOODS FIRST LAST
//
// buys for users user-FIRST .. user-LAST, 16 at a time, and prints one line
// per user: "user status order_id how", how being "answer" (seckill_buy said
// so) or "asked:SQLSTATE" (its call failed with SQLSTATE, seckill_order told).
'use strict';
const { Pool, types } = require('pg');

// Order ids are bigint: parse them as BigInt (node-pg leaves int8 as strings,
// and a JavaScript number loses precision past 2^53).
types.setTypeParser(types.builtins.INT8, (v) => BigInt(v));

const pool = new Pool({
  connectionString: process.env.DATABASE_URL,
  max: 16,
  // No query_timeout: it gives up on the client side without cancelling the
  // call, which then completes unseen.  The server bounds the wait instead.
  options: '-c seckill.request_timeout=2s',
});
// A pooled connection that dies while idle (server restart, terminated
// backend) emits 'error': without a handler the process would exit.
pool.on('error', (err) => console.error(`idle connection lost: ${err.message}`));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The fate of a purchase whose call failed: seckill_order() waits until the
// worker has settled every earlier request, so its answer is final.  It can
// fail too (Redis or the worker still away): ask again, a little later.
async function fateOf(user, goods) {
  for (let attempt = 1; ; attempt++) {
    try {
      const { rows } = await pool.query(
        'SELECT status, order_id FROM seckill_order($1, $2)', [user, goods]);
      return rows[0];
    } catch (err) {
      if (attempt === 10) throw err;
      await sleep(200 * attempt);
    }
  }
}

async function buy(user, goods) {
  try {
    const { rows } = await pool.query(
      'SELECT status, order_id FROM seckill_buy($1, $2)', [user, goods]);
    return { status: rows[0].status, orderId: rows[0].order_id, how: 'answer' };
  } catch (err) {
    const fate = await fateOf(user, goods);
    return { status: fate.status, orderId: fate.order_id, how: `asked:${err.code || 'none'}` };
  }
}

async function main() {
  const [goods, first, last] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const users = [];
  for (let i = first; i <= last; i++) users.push(`user-${i}`);
  let next = 0;
  const worker = async () => {
    while (next < users.length) {
      const user = users[next++];
      const r = await buy(user, goods);
      console.log(`${user} ${r.status} ${r.orderId === null ? '-' : r.orderId} ${r.how}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
