// A third-party MCP client (the TypeScript SDK v2's @modelcontextprotocol/client) lends its model to an
// agent served over stdio: its sampling handler plays the model (scripted), and the SDK answers each
// InputRequiredResult by itself. Prints one JSON line: the negotiated version, the handler's calls, the result.
// Usage: node ts_sampling_client.mjs <peers node_modules dir> <server command> [args...]
import { pathToFileURL } from "node:url";
import path from "node:path";

const [modules, command, ...args] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(modules, "@modelcontextprotocol/client/dist", p)).href);
const { Client } = await load("index.mjs");
const { StdioClientTransport } = await load("stdio.mjs");

const script = [
  { role: "assistant", model: "ts-host-model", stopReason: "toolUse",
    content: [{ type: "tool_use", id: "tu1", name: "lookup", input: { key: "paris" } }] },
  { role: "assistant", model: "ts-host-model", stopReason: "endTurn", content: { type: "text", text: "Paris." } },
];
const asked = [];
// 2026-07-28 is opt-in in this SDK (its default negotiation is the handshake era): pin it.
const client = new Client({ name: "ts-interop", version: "0" }, {
  capabilities: { sampling: { tools: {} } },
  versionNegotiation: { mode: { pin: "2026-07-28" } },
});
client.setRequestHandler("sampling/createMessage", async (request, ctx) => {
  const params = request.params ?? request;
  asked.push({ tools: (params.tools ?? []).map((t) => t.name), messages: params.messages.length,
               id: ctx?.mcpReq?.id ?? null });
  return script.shift();
});
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "ignore" });
await client.connect(transport);
const version = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null;
const result = await client.callTool({ name: "agent_researcher", arguments: { task: "What is the capital of France?" } });
console.log(JSON.stringify({ version, asked, result }));
await client.close();
