// Publishes one event and a batch with @rivora/sdk's public exports only
// (this script imports the built package by its own name: `npm run build`
// first). Prints the event ids as JSON.
//
//   RIVORA_URL=http://127.0.0.1:7400 RIVORA_TOKEN=$(cat data/admin.token) \
//   RIVORA_DESTINATION=orders node examples/publish.mjs
import { Code, RivoraClient, RivoraError } from "@rivora/sdk";

const client = new RivoraClient({
  baseUrl: process.env.RIVORA_URL ?? "http://127.0.0.1:7400",
  token: process.env.RIVORA_TOKEN,
});
const destinationId = process.env.RIVORA_DESTINATION ?? "orders";

try {
  const { eventId } = await client.publish({
    destinationId,
    customerId: "acme",
    laneKey: "user_1",
    type: "order.created",
    payload: '{"order":1}',
  });
  const { eventIds } = await client.publishBatch([
    { destinationId, customerId: "acme", laneKey: "user_1", type: "order.paid", payload: '{"order":1}' },
    { destinationId, customerId: "acme", laneKey: "user_2", type: "order.created", payload: new TextEncoder().encode('{"order":2}') },
  ]);
  console.log(JSON.stringify({ eventId, eventIds }));
} catch (err) {
  if (err instanceof RivoraError) {
    console.error(`publish failed (${err.codeName}${err.code === Code.Unauthenticated ? ": set RIVORA_TOKEN" : ""}): ${err.message}`);
    process.exit(1);
  }
  throw err;
}
