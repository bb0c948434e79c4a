/**
 * Interlock's TypeScript SDK: durable human-in-the-loop interrupts for AI
 * agent runs, over NATS JetStream. The wire contract is docs/protocol.md.
 */

export { callDigest, canonicalize, MAX_CALL_DEPTH, RawJson, rawJson } from "./calldigest.js";
export {
  CallMismatch,
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
  approvedArguments,
  askKey,
  checkCall,
  currentToolCall,
  executionKey,
  emit,
  emitText,
  emitToolCall,
  emitToolResult,
  gather,
  interrupt,
  interruptAsync,
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
  workerDurable,
  type StoredEvent,
} from "./subjects.js";
export {
  Decision,
  EXPIRY_APPROVER,
  POLICY_APPROVER,
  remaining,
  Run,
  tallyFrom,
  voteFrom,
  type Call,
  type ExpiryPolicy,
  type Policy,
  type Tally,
  type Vote,
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
  MAX_DECISION_DEPTH,
  MAX_DECISION_SIZE,
  MAX_DEPTH,
  MAX_ID_LEN,
  MAX_MESSAGE_SIZE,
  MAX_POLICY_VOTES,
  validateInterrupt,
  VERSION,
  VERSION2,
  versioned,
  wireVersion,
  type MessageKind,
} from "./wire.js";
/**
 * For adapters keeping state in a stream of their own: the last message on
 * a subject, read with one direct get naming it, and whether it was a
 * client's publish (not an answer the server stored there for another user).
 */
export { last as lastStored, type Stored as StoredMessage } from "./direct.js";
export { approvedCallMatches, toolApprovalBody, type ApprovedCall, type ToolApproval } from "./approval.js";
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
