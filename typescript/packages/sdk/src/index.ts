/**
 * Interlock's TypeScript SDK: durable human-in-the-loop interrupts for AI
 * agent runs, over NATS JetStream. The wire contract is docs/protocol.md.
 */

export {
  Cancelled,
  InterlockError,
  InvalidRequest,
  InvalidToken,
  NotInRun,
  PassTimeout,
  ProtocolError,
  Rejected,
  Retry,
  RunNotFound,
  Suspended,
  Timeout,
  ToolCallMismatch,
  WorkerStopping,
  type CancelReason,
} from "./errors.js";
export {
  deadLetterMsgId,
  decisionAttemptMsgId,
  decisionMsgId,
  emitMsgId,
  interruptId,
  nonce,
  outcomeMsgId,
  passKey,
  pendingKey,
  replyToken,
  startMsgId,
  stepKey,
  uuid7,
  workMsgId,
} from "./ids.js";
export type { JsonObject, JsonValue } from "./json.js";
export {
  currentToolCall,
  emit,
  emitText,
  emitToolCall,
  emitToolResult,
  gather,
  interrupt,
  isResuming,
  onRunFinished,
  passSignal,
  restartSteps,
  runInfo,
  step,
  toolCall,
} from "./run.js";
export {
  DECISION_EVENT_TYPES,
  DEFAULT_PREFIX,
  inboxPrefix,
  MAX_TOKEN_LEN,
  Namespace,
  NO_RUN,
  OBSERVATION_TYPES,
  validateToken,
  type StoredEvent,
} from "./subjects.js";
export {
  Decision,
  EXPIRY_APPROVER,
  Run,
  type ExpiryPolicy,
  type PendingInterrupt,
  type Request,
  type RunInfo,
  type RunInterrupt,
  type RunStatus,
  type Status,
  type Verdict,
} from "./types.js";
export {
  DECODERS,
  decodeCompletion,
  decodeDecision,
  decodeFailure,
  decodeSuspension,
  decodeWork,
  MAX_DECISION_SIZE,
  MAX_ID_LEN,
  MAX_MESSAGE_SIZE,
  validateInterrupt,
  VERSION,
} from "./wire.js";
export { toolApprovalBody, type ToolApproval } from "./approval.js";
export { Worker, type AgentBody, type Logger, type PassContext, type WorkerOptions } from "./worker.js";
export {
  Client,
  finished,
  suspended,
  type ClientOptions,
  type DecideOptions,
  type StartOptions,
  type WaitOptions,
} from "./client.js";
