// Local AWS Step Functions endpoint for onejob: serves the AWS JSON 1.0
// protocol (the subset the project uses) on top of aws-local-stepfunctions,
// which executes the real ASL. Executions live in memory only.
//
// Usage:
//   node internal/dev/sfnlocal/server.mjs --host 127.0.0.1 --port 0 \
//     --definition statemachine/onejob.asl.json \
//     --subst StartAttemptFunctionArn=arn:aws:lambda:... [--subst K=V ...] \
//     --state-machine-arn arn:aws:states:us-east-1:000000000000:stateMachine:onejob \
//     [--lambda-endpoint http://127.0.0.1:PORT] [--region us-east-1] \
//     [--retry-pause-ms N] [--exit-on-stdin-close] [--idle-timeout-ms N] \
//     [--lambda-max-sockets N] [--keep-closed N] [--keep-closed-names N]
//
// Prints "READY <port>" on stdout once listening. Logs JSON lines on stderr.
// Task states reach Lambda through the library's own AWS SDK client, which
// honours AWS_ENDPOINT_URL_LAMBDA, so handlers see real Invoke API requests.
// The library built a new client (and with it a new keep-alive agent, so a
// new connection left open) for every task; it is patched to use one client
// for the process, on one agent of at most --lambda-max-sockets (default 128)
// connections, of which it keeps at most 8 idle. The agent closes no idle
// connection itself: the Lambda endpoint's idle timeout does.
//
// Connections to this server are closed after --idle-timeout-ms (default
// 30000) idle; a request's headers must arrive within 10 s, the whole
// request within 60 s.
//
// Memory is bounded: closed executions are kept whole (history, input,
// output) up to --keep-closed (default 1000), oldest dropped first. A dropped
// execution is gone as one past AWS's retention period is (Describe, history
// and listings no longer know it), except that StartExecution still refuses
// its name, as AWS does for 90 days: the names of the last
// --keep-closed-names (default 100000) dropped executions are kept.
//
// Operations (X-Amz-Target: AWSStepFunctions.<Op>): StartExecution,
// DescribeExecution, StopExecution, GetExecutionHistory, ListExecutions.
// StartExecution follows AWS's documented Standard-workflow rules: same name
// and same input as a RUNNING execution returns the original executionArn and
// startDate; a different input, or any input once the execution is closed,
// is ExecutionAlreadyExists. Inputs are compared as strings; a missing input
// is "{}".
//
// Not AWS: GET /health (with the numbers of executions kept, running and
// dropped by name only); GET /executions/<name>/transitions and the extra
// "stateTransitions" field of DescribeExecution (billed transitions: states
// entered plus retries); POST /control/gc (a full collection; see
// ../nodegc/gc.cjs), POST /control/throttle {"share","first","seed"},
// which refuses StartExecution calls with ThrottlingException as AWS does
// past its quota: the first `first` calls, then each with probability
// `share` (a seeded generator, so a sequence of calls is reproducible).
// GET /health reports the calls throttled since.
//
// The library is loaded with a few patches where it departs from AWS; see
// libraryPatches.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import nodegc from '../nodegc/gc.cjs';

const { serveGC } = nodegc;

function log(level, msg, fields = {}) {
  process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }) + '\n');
}

function parseArgs(argv) {
  const opts = {
    host: '127.0.0.1',
    port: 0,
    definition: '',
    subst: {},
    stateMachineArn: 'arn:aws:states:us-east-1:000000000000:stateMachine:onejob',
    region: process.env.AWS_REGION || 'us-east-1',
    lambdaEndpoint: '',
    retryPauseMs: -1,
    exitOnStdinClose: false,
    idleTimeoutMs: 30000,
    lambdaMaxSockets: 128,
    lambdaConnectTimeoutMs: 5000,
    keepClosed: 1000,
    keepClosedNames: 100000,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`missing value for ${arg}`);
      return argv[++i];
    };
    switch (arg) {
      case '--host': opts.host = next(); break;
      case '--port': opts.port = Number(next()); break;
      case '--definition': opts.definition = next(); break;
      case '--subst': {
        const kv = next();
        const eq = kv.indexOf('=');
        if (eq <= 0) throw new Error(`--subst wants Key=Value, got ${kv}`);
        opts.subst[kv.slice(0, eq)] = kv.slice(eq + 1);
        break;
      }
      case '--state-machine-arn': opts.stateMachineArn = next(); break;
      case '--region': opts.region = next(); break;
      case '--lambda-endpoint': opts.lambdaEndpoint = next(); break;
      case '--retry-pause-ms': opts.retryPauseMs = Number(next()); break;
      case '--exit-on-stdin-close': opts.exitOnStdinClose = true; break;
      case '--idle-timeout-ms': opts.idleTimeoutMs = Number(next()); break;
      case '--lambda-max-sockets': opts.lambdaMaxSockets = Number(next()); break;
      case '--lambda-connect-timeout-ms': opts.lambdaConnectTimeoutMs = Number(next()); break;
      case '--keep-closed': opts.keepClosed = Number(next()); break;
      case '--keep-closed-names': opts.keepClosedNames = Number(next()); break;
      default: throw new Error(`unknown argument ${arg}`);
    }
  }
  if (!opts.definition) throw new Error('--definition is required');
  if (!Number.isInteger(opts.port) || opts.port < 0) throw new Error('--port must be an integer >= 0');
  for (const [flag, v] of [['--idle-timeout-ms', opts.idleTimeoutMs], ['--lambda-max-sockets', opts.lambdaMaxSockets],
    ['--lambda-connect-timeout-ms', opts.lambdaConnectTimeoutMs],
    ['--keep-closed', opts.keepClosed], ['--keep-closed-names', opts.keepClosedNames]]) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${flag} must be a positive integer`);
  }
  return opts;
}

// substitute replaces ${Key} like CloudFormation DefinitionSubstitutions and
// refuses leftovers: a missing ARN would otherwise only fail at run time.
function substitute(text, subst) {
  const missing = new Set();
  const out = text.replace(/\$\{([A-Za-z0-9_.:-]+)\}/g, (whole, key) => {
    if (!(key in subst)) {
      missing.add(key);
      return whole;
    }
    return JSON.stringify(String(subst[key])).slice(1, -1);
  });
  if (missing.size > 0) throw new Error(`definition has unsubstituted placeholders: ${[...missing].join(', ')}`);
  return out;
}

// indexStates maps every state name (nested branches and iterators included)
// to its definition; ASL requires names to be unique machine-wide.
function indexStates(definition, out = new Map()) {
  for (const [name, state] of Object.entries(definition.States ?? {})) {
    out.set(name, state);
    for (const branch of state.Branches ?? []) indexStates(branch, out);
    if (state.Iterator) indexStates(state.Iterator, out);
    if (state.ItemProcessor) indexStates(state.ItemProcessor, out);
  }
  return out;
}

// throttle decides which StartExecution calls are refused as throttled.
const throttle = { share: 0, first: 0, seen: 0, throttled: 0, rand: mulberry32(1) };

// mulberry32 is a small seeded generator (public domain).
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function setThrottle(req) {
  const share = Number(req.share ?? 0);
  const first = Number(req.first ?? 0);
  const seed = Number(req.seed ?? 1);
  if (!(share >= 0 && share <= 1) || !Number.isInteger(first) || first < 0 || !Number.isInteger(seed)) {
    throw new APIError('ValidationException', 'throttle wants 0 <= share <= 1, an integer first >= 0 and an integer seed');
  }
  Object.assign(throttle, { share, first, seen: 0, throttled: 0, rand: mulberry32(seed) });
  return { share, first, seed };
}

function throttled() {
  throttle.seen++;
  const refuse = throttle.seen <= throttle.first || (throttle.share > 0 && throttle.rand() < throttle.share);
  if (refuse) throttle.throttled++;
  return refuse;
}

class APIError extends Error {
  constructor(type, message, status = 400) {
    super(message);
    this.type = type;
    this.status = status;
  }
}

// Patches to aws-local-stepfunctions 3.0.0 where it departs from AWS in ways
// onejob.asl.json depends on. Each must match exactly once, so a library
// upgrade fails loudly here instead of silently changing semantics.
const libraryPatches = [
  {
    // AWS resolves TimeoutSecondsPath against the state input (after
    // InputPath, before Parameters); the library used the Parameters output,
    // so "$.step.timeout_seconds" failed with States.Runtime.
    find: 'const executionResult = await taskStateAction.execute(input, context, { overrideFn, awsConfig });',
    replace: 'const executionResult = await taskStateAction.execute(input, context, { overrideFn, awsConfig, ' +
      'timeoutInput: "InputPath" in stateDefinition ? processInputPath(stateDefinition.InputPath, rawInput, context) : rawInput });',
  },
  {
    // ...and resolve it before invoking the Lambda: the library invoked first,
    // so a bad path still ran the function and leaked a rejected promise.
    find: '    const taskPromise = options.overrideFn ? (',
    replace: '    const timeoutMs = this.getTimeoutMs(options.timeoutInput ?? input, context);\n    const taskPromise = options.overrideFn ? (',
  },
  { find: '    const timeoutMs = this.getTimeoutMs(input, context);\n', replace: '' },
  {
    // AWS sets a caught Lambda error's Cause to the function's error payload
    // ({"errorMessage","errorType"} JSON); the library used "type: message".
    find: '        `${errorResult.errorType}: ${errorResult.errorMessage}`,',
    replace: '        JSON.stringify(errorResult),',
  },
  {
    // AWS Task states have no default timeout (the Lambda's own timeout
    // bounds them); the library failed them with States.Timeout after 60 s.
    // 2147483 s is the longest timer Node accepts.
    find: 'var DEFAULT_TIMEOUT_SECONDS = 60;',
    replace: 'var DEFAULT_TIMEOUT_SECONDS = 2147483;',
  },
  {
    // One Lambda client for the process instead of one per task invocation:
    // each client had its own keep-alive agent, so every task left a
    // connection open to the Lambda endpoint (and the client in memory).
    find: 'var LambdaClient = class {',
    replace: 'var lambdaClients = new Map();\n' +
      'function sharedLambdaClient(config) {\n' +
      '  let client = lambdaClients.get(config);\n' +
      '  if (!client) {\n' +
      '    client = new LambdaClient(config);\n' +
      '    lambdaClients.set(config, client);\n' +
      '  }\n' +
      '  return client;\n' +
      '}\n' +
      'var LambdaClient = class {',
  },
  {
    find: '      new LambdaClient(options.awsConfig).invokeFunction(state.Resource, input)',
    replace: '      sharedLambdaClient(options.awsConfig).invokeFunction(state.Resource, input)',
  },
  {
    // ...on the agent awsConfig.requestHandler brings (the library passed
    // only region and credentials on).
    find: '        this.client = new AWSLambdaClient({ region: config.region, credentials: config.credentials.accessKeys });',
    replace: '        this.client = new AWSLambdaClient({ region: config.region, credentials: config.credentials.accessKeys, ' +
      'requestHandler: config.requestHandler });',
  },
  {
    // A Lambda invoke that fails before the function answers is reported
    // as Step Functions reports it, Lambda.<exception>, so the definition's
    // Retry and Catch rules for Lambda service errors apply; the library
    // passed the SDK's error on under its own name (a TimeoutError failed
    // the Hold state, which retries only Lambda.* names, and with it the
    // execution). A client-side timeout (here also the wait for a free
    // socket, which stands for AWS Lambda's concurrency limit) is
    // Lambda.ClientExecutionTimeoutException, an answer of the Lambda
    // endpoint Lambda.<its error code>, anything else (refused, reset: the
    // SDK names a reset a TimeoutError too) Lambda.SdkClientException.
    find: '    const invocationResult = await this.client.send(invokeCommand);',
    replace: '    let invocationResult;\n' +
      '    try {\n' +
      '      invocationResult = await this.client.send(invokeCommand);\n' +
      '    } catch (err) {\n' +
      '      const timedOut = err?.name === "TimeoutError" && err?.code !== "ECONNRESET" && err?.code !== "EPIPE";\n' +
      '      const name = timedOut ? "ClientExecutionTimeoutException"\n' +
      '        : err?.$metadata?.httpStatusCode && err?.name ? err.name : "SdkClientException";\n' +
      '      throw Object.assign(new Error(String(err?.message ?? err)), { name: "Lambda." + name });\n' +
      '    }',
  },
  {
    // An abort cuts the retry pause short; without this the state then ran
    // once more, invoking its Lambda after StopExecution.
    find: '        await sleep(waitTimeBeforeRetry, options.abortSignal);',
    replace: '        await sleep(waitTimeBeforeRetry, options.abortSignal);\n        if (options.abortSignal?.aborted) throw error;',
  },
];

async function importPatchedLibrary() {
  const libURL = import.meta.resolve('aws-local-stepfunctions');
  let src = readFileSync(new URL(libURL), 'utf8');
  for (const { find, replace } of libraryPatches) {
    const at = src.indexOf(find);
    if (at < 0 || src.indexOf(find, at + 1) >= 0) {
      throw new Error(`aws-local-stepfunctions changed: patch anchor not found exactly once: ${find.trim()}`);
    }
    src = src.slice(0, at) + replace + src.slice(at + find.length);
  }
  // A data: module cannot resolve bare specifiers; pin them to the files
  // Node would load from here (the library has no nested node_modules).
  src = src.replace(/from "([^".][^"]*)"/g, (_, spec) => `from "${import.meta.resolve(spec)}"`);
  return import('data:text/javascript;base64,' + Buffer.from(src).toString('base64'));
}

const opts = parseArgs(process.argv.slice(2));
if (opts.lambdaEndpoint) process.env.AWS_ENDPOINT_URL_LAMBDA = opts.lambdaEndpoint;

const { StateMachine, ExecutionAbortedError, ExecutionTimeoutError, ExecutionError } = await importPatchedLibrary();

const definition = JSON.parse(substitute(readFileSync(opts.definition, 'utf8'), opts.subst));
const statesByName = indexStates(definition);
const stateMachineName = opts.stateMachineArn.split(':').pop();
// The role lives in the state machine's account.
const roleArn = `arn:aws:iam::${opts.stateMachineArn.split(':')[4]}:role/${stateMachineName}-local`;

// Built once: the validator costs 200-400 ms per construction.
const t0 = Date.now();
const stateMachine = new StateMachine(definition, {
  validationOptions: { checkArn: true, checkPaths: true },
  awsConfig: {
    region: opts.region,
    // The SDK's NodeHttpHandler options (its shorthand form): keep-alive
    // connections, at most lambdaMaxSockets at once (more invocations wait
    // for one), at most 8 kept idle, reused most recent first so that a
    // burst's extra connections fall idle and the endpoint closes them.
    requestHandler: {
      httpAgent: new http.Agent({
        keepAlive: true,
        maxSockets: opts.lambdaMaxSockets,
        maxFreeSockets: Math.min(opts.lambdaMaxSockets, 8),
        scheduling: 'lifo',
      }),
      // Counted from the request, so it includes the wait for one of the
      // lambdaMaxSockets (see the patch naming Lambda invoke errors).
      connectionTimeout: opts.lambdaConnectTimeoutMs,
    },
    credentials: {
      accessKeys: {
        accessKeyId: process.env.AWS_ACCESS_KEY_ID || 'local',
        secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY || 'local',
      },
    },
  },
});
log('INFO', 'state_machine_loaded', {
  state_machine_arn: opts.stateMachineArn,
  states: statesByName.size,
  validate_ms: Date.now() - t0,
  lambda_endpoint: process.env.AWS_ENDPOINT_URL_LAMBDA || '',
});

const retryIntervalOverrides = {};
if (opts.retryPauseMs >= 0) {
  for (const [name, state] of statesByName) {
    if (state.Retry) retryIntervalOverrides[name] = opts.retryPauseMs;
  }
}

/** @type {Map<string, any>} executions by name: running, and the last keepClosed closed */
const executions = new Map();
// Names of the closed executions kept whole, oldest first.
const closedKept = new Set();
// Names of dropped executions, oldest first: StartExecution refuses them.
const droppedNames = new Set();
// Executions not yet closed, for GET /health (drills pace themselves by it).
let runningCount = 0;

const epochSeconds = (ms) => ms / 1000;
const toJSONString = (v) => (v === undefined ? undefined : JSON.stringify(v));
const causeString = (cause, message) => {
  if (cause === undefined || cause === null) return message ?? '';
  return typeof cause === 'string' ? cause : JSON.stringify(cause);
};

function executionArnFor(name) {
  return opts.stateMachineArn.replace(':stateMachine:', ':execution:') + ':' + name;
}

function findByArn(arn) {
  if (typeof arn !== 'string' || !arn.startsWith('arn:')) throw new APIError('InvalidArn', `Invalid Arn: '${arn}'`);
  const name = arn.split(':').pop();
  const exec = executions.get(name);
  if (!exec || exec.executionArn !== arn) throw new APIError('ExecutionDoesNotExist', `Execution Does Not Exist: '${arn}'`);
  return exec;
}

// AWS name rules: 1-80 chars, no whitespace, brackets, wildcards, listed
// punctuation or control characters.
const invalidNameChars = /[\s<>{}[\]?*"#%\\^|~`$&,;:/\u0000-\u001f\u007f-\u009f]/;

function addEvent(exec, type, details = {}) {
  const id = exec.events.length + 1;
  exec.events.push({ id, previousEventId: id - 1, timestamp: epochSeconds(Date.now()), type, ...details });
}

function isLambdaResource(resource) {
  return typeof resource === 'string' && /^arn:[^:]+:lambda:/.test(resource);
}

// recordLibraryEvent translates the library's event log into AWS history
// event types. The library has no per-attempt task events, so Lambda
// scheduling is derived from state entry and retries.
function recordLibraryEvent(exec, ev) {
  const state = ev.state;
  const type = state?.type;
  // Map iterations run states of the same name concurrently.
  const stateKey = state ? `${state.name}#${ev.index ?? ''}` : '';
  const taskEvent = (suffix, details) => {
    const resource = statesByName.get(state.name)?.Resource;
    if (isLambdaResource(resource)) {
      const key = 'lambdaFunction' + suffix + 'EventDetails';
      addEvent(exec, 'LambdaFunction' + suffix, details === undefined ? {} : { [key]: details });
    } else {
      const key = 'task' + suffix + 'EventDetails';
      addEvent(exec, 'Task' + suffix, { [key]: { resource, resourceType: 'unknown', ...(details ?? {}) } });
    }
  };
  switch (ev.type) {
    case 'StateEntered': {
      exec.stateTransitions++;
      addEvent(exec, `${type}StateEntered`, {
        stateEnteredEventDetails: { name: state.name, input: toJSONString(state.input) },
      });
      if (type === 'Task') {
        taskEvent('Scheduled', { resource: statesByName.get(state.name)?.Resource });
        taskEvent('Started');
      } else if (type === 'Parallel' || type === 'Map') {
        addEvent(exec, `${type}StateStarted`);
      }
      break;
    }
    case 'StateExited': {
      // After a Catch the library still reports StateExited; the failure was
      // already recorded by StateFailed.
      const caught = exec.caught.delete(stateKey);
      if (!caught && type === 'Task') taskEvent('Succeeded', {});
      else if (!caught && (type === 'Parallel' || type === 'Map')) addEvent(exec, `${type}StateSucceeded`);
      addEvent(exec, `${type}StateExited`, {
        stateExitedEventDetails: { name: state.name, output: toJSONString(state.output) },
      });
      break;
    }
    case 'StateFailed': {
      const details = { error: ev.Error, cause: causeString(ev.Cause) };
      if (type === 'Task') taskEvent(ev.Error === 'States.Timeout' ? 'TimedOut' : 'Failed', details);
      else if (type === 'Parallel' || type === 'Map') addEvent(exec, `${type}StateFailed`);
      break;
    }
    case 'StateRetried': {
      // AWS bills a retry as a state transition.
      exec.stateTransitions++;
      if (type === 'Task') {
        taskEvent('Scheduled', { resource: statesByName.get(state.name)?.Resource });
        taskEvent('Started');
      } else if (type === 'Parallel' || type === 'Map') {
        addEvent(exec, `${type}StateStarted`);
      }
      break;
    }
    case 'StateCaught':
      exec.caught.add(stateKey);
      break;
    case 'MapIterationStarted':
    case 'MapIterationSucceeded':
    case 'MapIterationFailed': {
      const key = ev.type[0].toLowerCase() + ev.type.slice(1) + 'EventDetails';
      addEvent(exec, ev.type, { [key]: { name: ev.parentState?.name, index: ev.index } });
      break;
    }
    case 'ExecutionSucceeded':
      addEvent(exec, 'ExecutionSucceeded', { executionSucceededEventDetails: { output: toJSONString(ev.output) } });
      break;
    case 'ExecutionFailed':
      addEvent(exec, 'ExecutionFailed', { executionFailedEventDetails: { error: ev.Error, cause: causeString(ev.Cause) } });
      break;
    case 'ExecutionAborted':
      addEvent(exec, 'ExecutionAborted', { executionAbortedEventDetails: { error: exec.error, cause: exec.cause } });
      break;
    case 'ExecutionTimeout':
      addEvent(exec, 'ExecutionTimedOut', { executionTimedOutEventDetails: { error: 'States.Timeout' } });
      break;
    default:
      // ExecutionStarted is recorded synchronously by startExecution;
      // ParallelBranch* have no AWS counterpart.
      break;
  }
}

async function drainEvents(exec, eventLogs) {
  try {
    for await (const ev of eventLogs) recordLibraryEvent(exec, ev);
  } catch (err) {
    log('ERROR', 'event_log_failed', { name: exec.name, error: String(err) });
  }
}

function closeExecution(exec, status, fields) {
  if (exec.status !== 'RUNNING') return; // StopExecution already closed it
  Object.assign(exec, fields, { status, stopDate: Date.now() });
  exec.handle = null;
  runningCount--;
  closedKept.add(exec.name);
  while (closedKept.size > opts.keepClosed) {
    const oldest = closedKept.values().next().value;
    closedKept.delete(oldest);
    executions.delete(oldest);
    droppedNames.add(oldest);
  }
  while (droppedNames.size > opts.keepClosedNames) droppedNames.delete(droppedNames.values().next().value);
  log('INFO', 'execution_closed', {
    name: exec.name,
    status,
    error: exec.error,
    duration_ms: exec.stopDate - exec.startDate,
    state_transitions: exec.stateTransitions,
  });
}

function startExecution(req) {
  if (req.stateMachineArn !== opts.stateMachineArn) {
    throw new APIError('StateMachineDoesNotExist', `State Machine Does Not Exist: '${req.stateMachineArn}'`);
  }
  if (throttled()) throw new APIError('ThrottlingException', 'Rate exceeded');
  const name = req.name ?? randomUUID();
  if (typeof name !== 'string' || name.length < 1 || name.length > 80 || invalidNameChars.test(name)) {
    throw new APIError('InvalidName', `Invalid Name: '${name}'`);
  }
  const input = req.input ?? '{}';
  let parsedInput;
  try {
    parsedInput = JSON.parse(input);
  } catch (err) {
    throw new APIError('InvalidExecutionInput', `Invalid State Machine Execution Input: '${err.message}'`);
  }

  // AWS (Standard): same name + same input while RUNNING -> the original
  // response; a closed execution or a different input -> ExecutionAlreadyExists.
  const existing = executions.get(name);
  if (existing) {
    if (existing.status === 'RUNNING' && existing.input === input) {
      return { executionArn: existing.executionArn, startDate: epochSeconds(existing.startDate) };
    }
    throw new APIError('ExecutionAlreadyExists', `Execution Already Exists: '${existing.executionArn}'`);
  }
  if (droppedNames.has(name)) {
    throw new APIError('ExecutionAlreadyExists', `Execution Already Exists: '${executionArnFor(name)}'`);
  }

  const exec = {
    name,
    executionArn: executionArnFor(name),
    stateMachineArn: opts.stateMachineArn,
    input,
    status: 'RUNNING',
    startDate: Date.now(),
    stopDate: undefined,
    output: undefined,
    error: undefined,
    cause: undefined,
    events: [],
    caught: new Set(),
    stateTransitions: 0,
    handle: null,
  };
  executions.set(name, exec);
  runningCount++;
  addEvent(exec, 'ExecutionStarted', {
    executionStartedEventDetails: {
      input,
      inputDetails: { truncated: false },
      roleArn,
      stateMachineArn: opts.stateMachineArn,
    },
  });

  const handle = stateMachine.run(parsedInput, {
    overrides: { retryIntervalOverrides },
    context: {
      Execution: { Id: exec.executionArn, Name: name, RoleArn: roleArn },
      StateMachine: { Id: opts.stateMachineArn, Name: stateMachineName },
    },
  });
  exec.handle = handle;
  drainEvents(exec, handle.eventLogs);
  handle.result.then(
    (output) => closeExecution(exec, 'SUCCEEDED', { output: JSON.stringify(output ?? null) }),
    (err) => {
      if (err instanceof ExecutionAbortedError) {
        closeExecution(exec, 'ABORTED', {});
      } else if (err instanceof ExecutionTimeoutError) {
        closeExecution(exec, 'TIMED_OUT', { error: 'States.Timeout', cause: '' });
      } else {
        const inner = err instanceof ExecutionError && err.cause ? err.cause : err;
        closeExecution(exec, 'FAILED', {
          error: inner?.name ?? 'Error',
          cause: causeString(inner?.cause, inner?.message),
        });
      }
    },
  );
  log('INFO', 'execution_started', { name });
  return { executionArn: exec.executionArn, startDate: epochSeconds(exec.startDate) };
}

function describeExecution(req) {
  const exec = findByArn(req.executionArn);
  const out = {
    executionArn: exec.executionArn,
    stateMachineArn: exec.stateMachineArn,
    name: exec.name,
    status: exec.status,
    startDate: epochSeconds(exec.startDate),
    input: exec.input,
    inputDetails: { included: true },
    redriveCount: 0,
    redriveStatus: 'NOT_REDRIVABLE',
    // Not part of the AWS API; the Go SDK ignores unknown fields. Use
    // GET /executions/<name>/transitions from Go.
    stateTransitions: exec.stateTransitions,
  };
  if (exec.stopDate !== undefined) out.stopDate = epochSeconds(exec.stopDate);
  if (exec.status === 'SUCCEEDED') {
    out.output = exec.output;
    out.outputDetails = { included: true };
  }
  if (exec.error !== undefined) out.error = exec.error;
  if (exec.cause !== undefined) out.cause = exec.cause;
  return out;
}

function stopExecution(req) {
  const exec = findByArn(req.executionArn);
  if (exec.status !== 'RUNNING') {
    // Stopping a closed execution changes nothing; report its stop date.
    return { stopDate: epochSeconds(exec.stopDate) };
  }
  const handle = exec.handle;
  closeExecution(exec, 'ABORTED', { error: req.error, cause: req.cause });
  // The library resolves the abort at once, but an in-flight Lambda call
  // keeps running (as on AWS) and is ignored when it returns.
  handle?.abort();
  return { stopDate: epochSeconds(exec.stopDate) };
}

function pageArgs(req, defaultMax) {
  const max = req.maxResults && req.maxResults > 0 ? Math.min(req.maxResults, 1000) : defaultMax;
  const start = req.nextToken ? Number(req.nextToken) : 0;
  if (!Number.isInteger(start) || start < 0) throw new APIError('InvalidToken', `Invalid Token: '${req.nextToken}'`);
  return { max, start };
}

function getExecutionHistory(req) {
  const exec = findByArn(req.executionArn);
  const { max, start } = pageArgs(req, 100);
  let events = exec.events.slice();
  if (req.reverseOrder) events.reverse();
  if (req.includeExecutionData === false) {
    events = events.map((e) => JSON.parse(JSON.stringify(e, (k, v) => (k === 'input' || k === 'output' ? undefined : v))));
  }
  const page = events.slice(start, start + max);
  const out = { events: page };
  if (start + max < events.length) out.nextToken = String(start + max);
  return out;
}

function listExecutions(req) {
  if (req.stateMachineArn !== undefined && req.stateMachineArn !== opts.stateMachineArn) {
    throw new APIError('StateMachineDoesNotExist', `State Machine Does Not Exist: '${req.stateMachineArn}'`);
  }
  const { max, start } = pageArgs(req, 100);
  const all = [...executions.values()]
    .filter((e) => !req.statusFilter || e.status === req.statusFilter)
    .sort((a, b) => b.startDate - a.startDate); // newest first, like AWS
  const page = all.slice(start, start + max).map((e) => {
    const item = {
      executionArn: e.executionArn,
      stateMachineArn: e.stateMachineArn,
      name: e.name,
      status: e.status,
      startDate: epochSeconds(e.startDate),
    };
    if (e.stopDate !== undefined) item.stopDate = epochSeconds(e.stopDate);
    return item;
  });
  const out = { executions: page };
  if (start + max < all.length) out.nextToken = String(start + max);
  return out;
}

const operations = {
  StartExecution: startExecution,
  DescribeExecution: describeExecution,
  StopExecution: stopExecution,
  GetExecutionHistory: getExecutionHistory,
  ListExecutions: listExecutions,
};

function send(res, status, body, contentType = 'application/x-amz-json-1.0') {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': contentType,
    'Content-Length': Buffer.byteLength(payload),
    'x-amzn-RequestId': randomUUID(),
  });
  res.end(payload);
}

function sendError(res, err) {
  // The Go SDK takes the code from X-Amzn-ErrorType or "__type" and maps it
  // to typed errors such as *types.ExecutionAlreadyExists.
  res.setHeader('X-Amzn-ErrorType', err.type);
  send(res, err.status, { __type: err.type, message: err.message });
}

function handle(req, res, body) {
  const url = new URL(req.url, 'http://localhost');
  if (req.method === 'GET' && url.pathname === '/health') {
    return send(res, 200, {
      status: 'ok', executions: executions.size, running: runningCount, dropped_names: droppedNames.size,
      throttledStarts: throttle.throttled,
    }, 'application/json');
  }
  if (req.method === 'POST' && url.pathname === '/control/throttle') {
    return send(res, 200, setThrottle(body.length ? JSON.parse(body) : {}), 'application/json');
  }
  const transitions = /^\/executions\/([^/]+)\/transitions$/.exec(url.pathname);
  if (req.method === 'GET' && transitions) {
    const exec = executions.get(decodeURIComponent(transitions[1]));
    if (!exec) return send(res, 404, { message: 'execution not found' }, 'application/json');
    return send(res, 200, {
      name: exec.name,
      executionArn: exec.executionArn,
      status: exec.status,
      stateTransitions: exec.stateTransitions,
    }, 'application/json');
  }
  if (req.method !== 'POST' || url.pathname !== '/') {
    return send(res, 404, { message: `no route for ${req.method} ${url.pathname}` }, 'application/json');
  }
  const target = req.headers['x-amz-target'] ?? '';
  const op = operations[target.startsWith('AWSStepFunctions.') ? target.slice('AWSStepFunctions.'.length) : ''];
  if (!op) throw new APIError('UnknownOperationException', `Unknown operation ${target}`);
  let parsed;
  try {
    parsed = body.length ? JSON.parse(body) : {};
  } catch (err) {
    throw new APIError('SerializationException', `Invalid JSON body: ${err.message}`);
  }
  return send(res, 200, op(parsed));
}

const server = http.createServer({
  // A request's headers within 10 s and all of it within 60 s (Node's
  // defaults are 60 s and 5 min); an idle connection closes after
  // idleTimeoutMs.
  headersTimeout: 10_000,
  requestTimeout: 60_000,
  keepAliveTimeout: opts.idleTimeoutMs,
}, (req, res) => {
  if (serveGC(req, res)) return;
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try {
      handle(req, res, Buffer.concat(chunks).toString('utf8'));
    } catch (err) {
      if (err instanceof APIError) return sendError(res, err);
      log('ERROR', 'request_failed', { error: String(err?.stack ?? err) });
      sendError(res, new APIError('InternalFailure', String(err?.message ?? err), 500));
    }
  });
});

let closing = false;
function shutdown(reason) {
  if (closing) return;
  closing = true;
  log('INFO', 'shutdown', { reason });
  for (const exec of executions.values()) exec.handle?.abort();
  server.close(() => process.exit(0));
  server.closeAllConnections();
  // Pending Lambda calls must not keep the process alive.
  setTimeout(() => process.exit(0), 1000).unref();
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
if (opts.exitOnStdinClose) {
  // The Go launcher holds our stdin open; EOF means it is gone.
  process.stdin.on('end', () => shutdown('stdin_closed'));
  process.stdin.on('error', () => shutdown('stdin_error'));
  process.stdin.resume();
}
process.on('unhandledRejection', (err) => log('ERROR', 'unhandled_rejection', { error: String(err?.stack ?? err) }));

server.listen(opts.port, opts.host, () => {
  const { port } = server.address();
  process.stdout.write(`READY ${port}\n`);
});
