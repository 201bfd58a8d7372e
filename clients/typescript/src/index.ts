export { parseEvents, type ServerSentEvent } from "./sse.js";
