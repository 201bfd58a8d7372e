export {
  PlanexecClient,
  PlanexecError,
  type AgentView,
  type Answer,
  type AnswerResult,
  type ClientOptions,
  type FollowOptions,
  type Problem,
  type Question,
  type RunDetail,
  type RunEvent,
  type RunList,
  type RunSummary,
  type StartRun,
  type StreamEnd,
  type Tell,
} from "./client.js";
export { parseEvents, type ServerSentEvent } from "./sse.js";
