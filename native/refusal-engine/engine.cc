// The early refusal engine: answers, in C++, the requests of connections whose source the rate limit
// has blocked, when each is a byte-for-byte repeat of a head the JavaScript path already scanned and
// answered on that connection (src/edge/http/early-refusal.ts decides everything; this only repeats
// its answer). Written by hand because it is the hot path of a flood: through Node's streams each
// refusal pays libuv's read callback, a call into JavaScript and a write through the StreamBase
// layer, which is more user-space CPU than nginx spends on the whole refusal (docs/benchmarks.md,
// "Refusing a blocked source"). Here one libuv event serves every ready connection: one epoll of our
// own, polled by a uv_poll on the thread's loop, then recv, memcmp, send.
//
// Nothing is parsed here. A read whose bytes are not exactly one or more copies of the connection's
// approved head (each followed by CRLF CRLF, empty lines between them allowed as RFC 9112 2.2 says),
// a read after the block ended, a write the kernel does not take whole, the peer's FIN and any error
// hand the connection back to JavaScript with the bytes not consumed and the answer bytes not
// written, and the engine forgets it. It uses the socket's own descriptor (a duplicate would count
// twice against the node's file-descriptor budget) and never closes it: JavaScript releases the
// connection here before its handle closes the descriptor (early-refusal.ts, releaseBeforeClose),
// so no number the kernel reuses is ever read or written here.
#include <node_api.h>
#include <uv.h>

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

constexpr size_t kReadSize = 64 * 1024;
constexpr int kMaxEvents = 256;
constexpr size_t kMaxAnswersPerRead = 64;
constexpr int kMaxReadsPerEvent = 16;

enum HandBackKind : int32_t { kBytes = 0, kEnd = 1, kError = 2 };

struct Answer {
  std::string bytes;
  size_t headLength = 0;
  // CLOCK_MONOTONIC ms.
  double blockedUntil = 0;
};

struct Connection {
  int fd = -1;
  int32_t answer = -1;
  std::string head;
  bool headOnly = false;
  bool live = false;
  uint32_t refused = 0;
};

struct HandBack {
  int32_t id;
  int32_t kind;
  // Refused since the last collect: the connection's count goes with it.
  uint32_t refused;
  std::string input;
  std::string output;
};

struct Engine {
  napi_env env = nullptr;
  int epfd = -1;
  uv_poll_t poll{};
  bool pollStarted = false;
  std::vector<Answer> answers;
  std::vector<Connection> connections;
  std::vector<int32_t> freeIds;
  std::vector<HandBack> handBacks;
  napi_ref onHandBack = nullptr;
  napi_async_context asyncContext = nullptr;
  char* buffer = nullptr;
  size_t live = 0;
  double refusedTotal = 0;
  napi_async_cleanup_hook_handle cleanupHook = nullptr;
};

double MonotonicMs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) * 1000.0 + static_cast<double>(now.tv_nsec) / 1e6;
}

void Forget(Engine* engine, int32_t id) {
  Connection& connection = engine->connections[id];
  if (!connection.live) return;
  epoll_ctl(engine->epfd, EPOLL_CTL_DEL, connection.fd, nullptr);
  connection.fd = -1;
  connection.live = false;
  connection.refused = 0;
  connection.head.clear();
  connection.head.shrink_to_fit();
  engine->freeIds.push_back(id);
  engine->live--;
}

// Always false: "read no more", for the callers that return it.
bool GiveBack(Engine* engine, int32_t id, int32_t kind, const char* input, size_t inputLength, std::string output) {
  const uint32_t refused = engine->connections[id].refused;
  engine->connections[id].refused = 0;
  Forget(engine, id);
  engine->handBacks.push_back(HandBack{id, kind, refused, std::string(input, inputLength), std::move(output)});
  return false;
}

// One read of a ready connection and its answers; true: the read filled the buffer, read again.
bool ReadOnce(Engine* engine, int32_t id, double now) {
  Connection& connection = engine->connections[id];
  const ssize_t got = recv(connection.fd, engine->buffer, kReadSize, 0);
  if (got == 0) return GiveBack(engine, id, kEnd, nullptr, 0, std::string());
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    return GiveBack(engine, id, kError, nullptr, 0, std::string());
  }
  const char* bytes = engine->buffer;
  const size_t length = static_cast<size_t>(got);
  const Answer& answer = engine->answers[connection.answer];
  const bool blocked = answer.blockedUntil > now;
  const std::string& head = connection.head;
  const size_t unit = connection.headOnly ? answer.headLength : answer.bytes.size();
  size_t position = 0;
  // Pipelined heads are answered in groups of up to kMaxAnswersPerRead, one system call a group.
  for (;;) {
    size_t answered = 0;
    while (position < length && answered < kMaxAnswersPerRead) {
      while (position < length && (bytes[position] == '\r' || bytes[position] == '\n')) position++;
      if (position == length || !blocked) break;
      if (length - position < head.size() + 4 || memcmp(bytes + position, head.data(), head.size()) != 0 ||
          memcmp(bytes + position + head.size(), "\r\n\r\n", 4) != 0)
        break;
      answered++;
      position += head.size() + 4;
    }
    if (answered == 0) break;
    ssize_t sent;
    if (answered == 1) {
      sent = send(connection.fd, answer.bytes.data(), unit, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      iovec parts[kMaxAnswersPerRead];
      for (size_t i = 0; i < answered; i++) parts[i] = iovec{const_cast<char*>(answer.bytes.data()), unit};
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = answered;
      sent = sendmsg(connection.fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (sent < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return GiveBack(engine, id, kError, nullptr, 0, std::string());
      sent = 0;
    }
    connection.refused += static_cast<uint32_t>(answered);
    engine->refusedTotal += static_cast<double>(answered);
    const size_t total = unit * answered;
    if (static_cast<size_t>(sent) < total) {
      // The client does not read: JavaScript writes the rest and stops reading until it does.
      std::string rest;
      rest.reserve(total - static_cast<size_t>(sent));
      for (size_t offset = static_cast<size_t>(sent); offset < total; offset += unit - (offset % unit))
        rest.append(answer.bytes.data() + (offset % unit), unit - (offset % unit));
      return GiveBack(engine, id, kBytes, bytes + position, length - position, std::move(rest));
    }
  }
  if (position < length) return GiveBack(engine, id, kBytes, bytes + position, length - position, std::string());
  return length == kReadSize;
}

// Edge-triggered (one poll of the socket per event, as nginx does, where level-triggered polls each
// ready socket again at the next wait): a connection is read until a read comes back short, the
// kernel's queue empty then (bytes arriving later raise a new edge). A client that keeps the
// buffer full that long goes back to JavaScript, which reads it level-triggered.
void Serve(Engine* engine, int32_t id, double now) {
  for (int reads = 0; ReadOnce(engine, id, now);)
    if (++reads == kMaxReadsPerEvent) {
      GiveBack(engine, id, kBytes, nullptr, 0, std::string());
      return;
    }
}



void CallHandBack(Engine* engine) {
  napi_env env = engine->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value callback;
  napi_value global;
  napi_value result;
  if (napi_get_reference_value(env, engine->onHandBack, &callback) == napi_ok && napi_get_global(env, &global) == napi_ok) {
    if (napi_make_callback(env, engine->asyncContext, global, callback, 0, nullptr, &result) == napi_pending_exception) {
      napi_value error;
      if (napi_get_and_clear_last_exception(env, &error) == napi_ok) napi_fatal_exception(env, error);
    }
  }
  napi_close_handle_scope(env, scope);
}

void OnPoll(uv_poll_t* handle, int status, int) {
  Engine* engine = static_cast<Engine*>(handle->data);
  if (status < 0) return;
  epoll_event events[kMaxEvents];
  const int ready = epoll_wait(engine->epfd, events, kMaxEvents, 0);
  const double now = MonotonicMs();
  for (int i = 0; i < ready; i++) {
    const int32_t id = static_cast<int32_t>(events[i].data.u32);
    if (id >= 0 && static_cast<size_t>(id) < engine->connections.size() && engine->connections[id].live) Serve(engine, id, now);
  }
  if (!engine->handBacks.empty() && engine->onHandBack != nullptr) CallHandBack(engine);
}

void Free(Engine* engine) {
  napi_remove_async_cleanup_hook(engine->cleanupHook);
  delete[] engine->buffer;
  delete engine;
}

// The thread's environment ends (a worker stops): every descriptor closed, and the poll handle
// closed before the loop is (an open handle there aborts the process).
void Cleanup(napi_async_cleanup_hook_handle hook, void* data) {
  Engine* engine = static_cast<Engine*>(data);
  engine->cleanupHook = hook;
  for (size_t id = 0; id < engine->connections.size(); id++) Forget(engine, static_cast<int32_t>(id));
  if (engine->epfd >= 0) close(engine->epfd);
  engine->epfd = -1;
  if (!engine->pollStarted) return Free(engine);
  uv_close(reinterpret_cast<uv_handle_t*>(&engine->poll), [](uv_handle_t* handle) { Free(static_cast<Engine*>(handle->data)); });
}

Engine* Get(napi_env env) {
  void* data = nullptr;
  napi_get_instance_data(env, &data);
  return static_cast<Engine*>(data);
}

napi_value Throw(napi_env env, const char* message) {
  napi_throw_error(env, "ERR_TPS_REFUSAL_ENGINE", message);
  return nullptr;
}

napi_value Number(napi_env env, double value) {
  napi_value result;
  napi_create_double(env, value, &result);
  return result;
}

// start(onHandBack): the epoll and its uv_poll on this thread's loop (unreferenced: it does not keep
// the loop alive). `onHandBack()` is called after a poll that handed connections back.
napi_value Start(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Engine* engine = Get(env);
  if (engine->epfd >= 0) return nullptr;
  napi_valuetype type;
  if (argc < 1 || napi_typeof(env, argv[0], &type) != napi_ok || type != napi_function) return Throw(env, "start needs a function");
  engine->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (engine->epfd < 0) return Throw(env, strerror(errno));
  uv_loop_t* loop;
  napi_get_uv_event_loop(env, &loop);
  if (uv_poll_init(loop, &engine->poll, engine->epfd) != 0) return Throw(env, "uv_poll_init failed");
  engine->poll.data = engine;
  uv_poll_start(&engine->poll, UV_READABLE, OnPoll);
  uv_unref(reinterpret_cast<uv_handle_t*>(&engine->poll));
  engine->pollStarted = true;
  napi_create_reference(env, argv[0], 1, &engine->onHandBack);
  napi_value resource;
  napi_value name;
  napi_create_object(env, &resource);
  napi_create_string_utf8(env, "tps.RefusalEngine", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, resource, name, &engine->asyncContext);
  return nullptr;
}

// setAnswer(index, bytes, headLength, blockedForMs): the answer (a whole keep-alive 429) that the
// connections adopted with this index get, and how much longer their block lasts.
napi_value SetAnswer(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Engine* engine = Get(env);
  int32_t index;
  void* data;
  size_t length;
  double headLength;
  double blockedFor;
  if (argc < 4 || napi_get_value_int32(env, argv[0], &index) != napi_ok || index < 0 || index > (1 << 24) ||
      napi_get_buffer_info(env, argv[1], &data, &length) != napi_ok || napi_get_value_double(env, argv[2], &headLength) != napi_ok ||
      napi_get_value_double(env, argv[3], &blockedFor) != napi_ok || headLength < 0 || headLength > static_cast<double>(length))
    return Throw(env, "setAnswer(index, bytes, headLength, blockedForMs)");
  if (static_cast<size_t>(index) >= engine->answers.size()) engine->answers.resize(static_cast<size_t>(index) + 1);
  Answer& answer = engine->answers[index];
  answer.bytes.assign(static_cast<const char*>(data), length);
  answer.headLength = static_cast<size_t>(headLength);
  answer.blockedUntil = MonotonicMs() + blockedFor;
  return nullptr;
}

// adopt(fd, answerIndex, head, headOnly): serves the connection from now on; its id, or -errno.
napi_value Adopt(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Engine* engine = Get(env);
  int32_t fd;
  int32_t index;
  void* head;
  size_t headLength;
  bool headOnly;
  if (argc < 4 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &index) != napi_ok ||
      napi_get_buffer_info(env, argv[2], &head, &headLength) != napi_ok || napi_get_value_bool(env, argv[3], &headOnly) != napi_ok)
    return Throw(env, "adopt(fd, answerIndex, head, headOnly)");
  if (engine->epfd < 0 || index < 0 || static_cast<size_t>(index) >= engine->answers.size() || headLength == 0 ||
      headLength > kReadSize)
    return Number(env, -EINVAL);
  if (fd < 0) return Number(env, -EBADF);
  int32_t id;
  if (!engine->freeIds.empty()) {
    id = engine->freeIds.back();
    engine->freeIds.pop_back();
  } else {
    id = static_cast<int32_t>(engine->connections.size());
    engine->connections.emplace_back();
  }
  epoll_event event{};
  event.events = EPOLLIN | EPOLLET;
  event.data.u32 = static_cast<uint32_t>(id);
  if (epoll_ctl(engine->epfd, EPOLL_CTL_ADD, fd, &event) != 0) {
    const int error = errno;
    engine->freeIds.push_back(id);
    return Number(env, -error);
  }
  Connection& connection = engine->connections[id];
  connection.fd = fd;
  connection.answer = index;
  connection.head.assign(static_cast<const char*>(head), headLength);
  connection.headOnly = headOnly;
  connection.live = true;
  connection.refused = 0;
  engine->live++;
  return Number(env, id);
}

// release(id): the engine forgets the connection (JavaScript closes it, or reads it again), no
// hand-back; the requests it refused there since the last collect.
napi_value Release(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Engine* engine = Get(env);
  int32_t id;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &id) != napi_ok) return Throw(env, "release(id)");
  if (id < 0 || static_cast<size_t>(id) >= engine->connections.size() || !engine->connections[id].live) return Number(env, 0);
  const uint32_t refused = engine->connections[id].refused;
  Forget(engine, id);
  return Number(env, refused);
}

// collect(pairs: Uint32Array): (id, refused) of the connections that refused requests since the
// last call, at most pairs.length / 2 of them; how many pairs were written.
napi_value Collect(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Engine* engine = Get(env);
  napi_typedarray_type type;
  size_t length;
  void* data;
  if (argc < 1 || napi_get_typedarray_info(env, argv[0], &type, &length, &data, nullptr, nullptr) != napi_ok || type != napi_uint32_array)
    return Throw(env, "collect(Uint32Array)");
  uint32_t* pairs = static_cast<uint32_t*>(data);
  size_t written = 0;
  for (size_t id = 0; id < engine->connections.size() && written + 1 < length; id++) {
    Connection& connection = engine->connections[id];
    if (!connection.live || connection.refused == 0) continue;
    pairs[written++] = static_cast<uint32_t>(id);
    pairs[written++] = connection.refused;
    connection.refused = 0;
  }
  return Number(env, static_cast<double>(written / 2));
}

napi_value StringOrNull(napi_env env, const std::string& bytes) {
  napi_value value;
  if (bytes.empty()) {
    napi_get_null(env, &value);
    return value;
  }
  void* data;
  napi_create_buffer_copy(env, bytes.size(), bytes.data(), &data, &value);
  return value;
}

// takeHandBacks(): [id, kind, refused, input | null, output | null, ...] of the connections handed back.
napi_value TakeHandBacks(napi_env env, napi_callback_info) {
  Engine* engine = Get(env);
  napi_value list;
  napi_create_array_with_length(env, engine->handBacks.size() * 5, &list);
  uint32_t at = 0;
  for (const HandBack& handBack : engine->handBacks) {
    napi_set_element(env, list, at++, Number(env, handBack.id));
    napi_set_element(env, list, at++, Number(env, handBack.kind));
    napi_set_element(env, list, at++, Number(env, handBack.refused));
    napi_set_element(env, list, at++, StringOrNull(env, handBack.input));
    napi_set_element(env, list, at++, StringOrNull(env, handBack.output));
  }
  engine->handBacks.clear();
  return list;
}

// stats(): [connections served now, requests refused so far].
napi_value Stats(napi_env env, napi_callback_info) {
  Engine* engine = Get(env);
  napi_value list;
  napi_create_array_with_length(env, 2, &list);
  napi_set_element(env, list, 0, Number(env, static_cast<double>(engine->live)));
  napi_set_element(env, list, 1, Number(env, engine->refusedTotal));
  return list;
}

napi_value Init(napi_env env, napi_value exports) {
  Engine* engine = new Engine();
  engine->env = env;
  engine->buffer = new char[kReadSize];
  napi_set_instance_data(env, engine, nullptr, nullptr);
  napi_add_async_cleanup_hook(env, Cleanup, engine, nullptr);
  const napi_property_descriptor methods[] = {
      {"start", nullptr, Start, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"setAnswer", nullptr, SetAnswer, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"adopt", nullptr, Adopt, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"release", nullptr, Release, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"collect", nullptr, Collect, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"takeHandBacks", nullptr, TakeHandBacks, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"stats", nullptr, Stats, nullptr, nullptr, nullptr, napi_default, nullptr},
  };
  napi_define_properties(env, exports, sizeof(methods) / sizeof(methods[0]), methods);
  return exports;
}

}  // namespace

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
