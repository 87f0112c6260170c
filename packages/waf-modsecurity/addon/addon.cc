// Node-API face of libmodsecurity (ModSecurity v3, Debian's libmodsecurity-dev 3.0.9).
//
// Exposes two classes:
//   RuleSet      a compiled rule set (msc_create_rules_set + msc_rules_add / msc_rules_add_file)
//   Transaction  one HTTP exchange against a RuleSet (msc_new_transaction_with_id ... cleanup)
// plus `version` and `whoAmI()`.
//
// Safety rules this file keeps, whatever JavaScript does:
// - Every call into ModSecurity is wrapped in try/catch: a C++ exception becomes a JS error.
// - A Transaction enforces the order of the phases (connection, URI, request headers, request body,
//   response headers, response body, logging). Calling a phase out of order, twice, or after
//   close() throws a JS error (code ERR_MODSEC_STATE) instead of reaching ModSecurity.
// - The native transaction is freed by close() (deterministic) or, if JS forgets, by the
//   finalizer. The RuleSet it runs against is kept alive by a shared_ptr until the last transaction
//   using it is freed, so RuleSet.close() while transactions are open is safe.
// - The SecLang parser (flex/bison) is not re-entrant: rule loading is serialized process-wide,
//   because worker threads each load their own RuleSet.
// - One ModSecurity instance per JS environment (main thread or worker), created lazily and never
//   deleted: ~ModSecurity() calls xmlCleanupParser(), which libxml2 forbids while other threads may
//   still use libxml2. Its persistent collections (IP, GLOBAL, ...) are therefore per thread.
//
// Stopping threads: a worker thread may be stopped (worker.terminate(), or Node stopping the
// workers at process exit) while its JavaScript is between two calls into this addon, which with
// the engine's pool under load is most of the time. From that moment every Node-API call that first
// checks that JavaScript may still run (napi_unwrap, property get/set, napi_instanceof, napi_throw...)
// fails with napi_pending_exception, starting with the napi_unwrap that node-addon-api makes before
// each instance method. node-addon-api turns that status into a C++
// Napi::Error, catches it at the callback boundary and calls ThrowAsJavaScriptException(), whose
// napi_throw fails the same way; by default it then throws Napi::Error again, out of a noexcept
// callback: std::terminate, "terminate called after throwing an instance of 'Napi::Error'", the
// whole process aborts. NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS (binding.gyp) makes it drop an
// exception that cannot be thrown because the environment is stopping, which is all there is to do
// then: the call returns undefined and the thread's JavaScript ends. NODE_ADDON_API_CPP_EXCEPTIONS_ALL
// likewise turns any other C++ exception reaching the boundary (std::bad_alloc...) into a JS error
// instead of std::terminate. Nothing in a destructor or finalizer here calls into JavaScript or
// throws: freeing a transaction or a rule set at environment teardown only calls ModSecurity.
//
// Matched rules are read from Transaction::m_rulesMessages (what the audit log prints) rather than
// from the server log callback: in 3.0.9 the callback is not called for the message of a rule that
// actually disrupted the transaction (rule_with_actions.cc, performLogging), while m_rulesMessages
// has every logged match, disruptive or not.

#include <napi.h>

#if !defined(NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS) || !defined(NODE_ADDON_API_CPP_EXCEPTIONS_ALL)
#error "build with NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS and NODE_ADDON_API_CPP_EXCEPTIONS_ALL (binding.gyp): see 'Stopping threads' above"
#endif

#include <modsecurity/modsecurity.h>
#include <modsecurity/rules_set.h>
#include <modsecurity/transaction.h>
#include <modsecurity/intervention.h>
#include <modsecurity/rule_message.h>
#include <modsecurity/rule_with_actions.h>
#include <modsecurity/collection/collection.h>
#include <modsecurity/collection/collections.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using modsecurity::ModSecurity;
using modsecurity::ModSecurityIntervention;
using modsecurity::RuleMessage;
using modsecurity::RulesSet;
using modsecurity::RulesSetProperties;

std::mutex g_global_mutex;  // SecLang parser + ModSecurity construction

// ---------------------------------------------------------------------------------------------
// Byte helpers

// Bytes of a JS value: Buffer / TypedArray / ArrayBuffer as is; a string as latin1 when every code
// unit is < 256 (Node's http module hands headers and URLs over as such "binary" strings), else as
// UTF-8.
bool ValueToBytes(const Napi::Value &value, std::string *out) {
  napi_env env = value.Env();
  if (value.IsBuffer() || value.IsTypedArray()) {
    Napi::TypedArray ta = value.As<Napi::TypedArray>();
    Napi::ArrayBuffer ab = ta.ArrayBuffer();
    const char *base = static_cast<const char *>(ab.Data());
    size_t len = ta.ByteLength();
    if (base == nullptr || len == 0) {
      out->clear();
      return true;
    }
    out->assign(base + ta.ByteOffset(), len);
    return true;
  }
  if (value.IsArrayBuffer()) {
    Napi::ArrayBuffer ab = value.As<Napi::ArrayBuffer>();
    if (ab.Data() == nullptr) {
      out->clear();
      return true;
    }
    out->assign(static_cast<const char *>(ab.Data()), ab.ByteLength());
    return true;
  }
  if (!value.IsString()) return false;
  size_t len = 0;
  if (napi_get_value_string_utf16(env, value, nullptr, 0, &len) != napi_ok) return false;
  std::u16string u16(len, u'\0');
  size_t copied = 0;
  if (napi_get_value_string_utf16(env, value, &u16[0], len + 1, &copied) != napi_ok) return false;
  u16.resize(copied);
  bool narrow = true;
  for (char16_t c : u16) {
    if (c > 0xFF) {
      narrow = false;
      break;
    }
  }
  if (narrow) {
    out->resize(u16.size());
    for (size_t i = 0; i < u16.size(); i++) (*out)[i] = static_cast<char>(u16[i]);
    return true;
  }
  *out = value.As<Napi::String>().Utf8Value();
  return true;
}

bool IsValidUtf8(const std::string &s) {
  const unsigned char *p = reinterpret_cast<const unsigned char *>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= extra; k++) {
      if (i + k >= n || (p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += extra + 1;
  }
  return true;
}

// ModSecurity strings are bytes: UTF-8 when they are valid UTF-8, else latin1 (one char per byte).
Napi::String BytesToString(Napi::Env env, const std::string &s) {
  if (IsValidUtf8(s)) return Napi::String::New(env, s.data(), s.size());
  napi_value result;
  napi_create_string_latin1(env, s.data(), s.size(), &result);
  return Napi::String(env, result);
}

Napi::Error StateError(Napi::Env env, const std::string &message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, "ERR_MODSEC_STATE"));
  return error;
}

Napi::Error RulesError(Napi::Env env, const std::string &message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, "ERR_MODSEC_RULES"));
  return error;
}

// ---------------------------------------------------------------------------------------------
// Per-environment data

void IgnoreServerLog(void *, const void *) {}

class Addon {
 public:
  Napi::FunctionReference ruleSetCtor;
  Napi::FunctionReference transactionCtor;

  ModSecurity *Msc() {
    if (msc_ == nullptr) {
      std::lock_guard<std::mutex> lock(g_global_mutex);
      msc_ = modsecurity::msc_init();
      modsecurity::msc_set_connector_info(msc_, "tps-node-addon/1.0");
      // Without a callback ModSecurity prints every match to stdout. Matches are read from the
      // transaction instead (see the header comment), so the callback does nothing.
      modsecurity::msc_set_log_cb(msc_, &IgnoreServerLog);
    }
    return msc_;
  }

 private:
  ModSecurity *msc_ = nullptr;  // intentionally never deleted, see the header comment
};

Addon *GetAddon(Napi::Env env) { return env.GetInstanceData<Addon>(); }

// ---------------------------------------------------------------------------------------------
// RuleSet

struct RulesHandle {
  RulesSet *rules;
  explicit RulesHandle(RulesSet *r) : rules(r) {}
  ~RulesHandle() {
    if (rules != nullptr) {
      try {
        modsecurity::msc_rules_cleanup(rules);
      } catch (...) {
      }
    }
  }
  RulesHandle(const RulesHandle &) = delete;
  RulesHandle &operator=(const RulesHandle &) = delete;
};

class RuleSetWrap : public Napi::ObjectWrap<RuleSetWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "RuleSet",
                       {
                           InstanceMethod<&RuleSetWrap::AddRules>("addRules"),
                           InstanceMethod<&RuleSetWrap::AddFile>("addFile"),
                           InstanceMethod<&RuleSetWrap::Close>("close"),
                           InstanceAccessor<&RuleSetWrap::GetClosed>("closed"),
                           InstanceAccessor<&RuleSetWrap::GetRuleCount>("ruleCount"),
                       });
  }

  explicit RuleSetWrap(const Napi::CallbackInfo &info) : Napi::ObjectWrap<RuleSetWrap>(info) {
    try {
      handle_ = std::make_shared<RulesHandle>(modsecurity::msc_create_rules_set());
    } catch (const std::exception &e) {
      throw Napi::Error::New(info.Env(), std::string("msc_create_rules_set: ") + e.what());
    }
  }

  std::shared_ptr<RulesHandle> Handle() const { return handle_; }

 private:
  Napi::Value Load(const Napi::CallbackInfo &info, bool isFile) {
    Napi::Env env = info.Env();
    if (!handle_) throw StateError(env, "RuleSet is closed");
    if (info.Length() < 1 || !info[0].IsString())
      throw Napi::TypeError::New(env, isFile ? "addFile(path: string)" : "addRules(text: string)");
    std::string arg = info[0].As<Napi::String>().Utf8Value();
    if (arg.find('\0') != std::string::npos)
      throw Napi::TypeError::New(env, "rules text or path must not contain NUL characters");
    int ret = -1;
    std::string error;
    {
      std::lock_guard<std::mutex> lock(g_global_mutex);
      RulesSet *rules = handle_->rules;
      try {
        const char *err = nullptr;
        ret = isFile ? modsecurity::msc_rules_add_file(rules, arg.c_str(), &err)
                     : modsecurity::msc_rules_add(rules, arg.c_str(), &err);
        if (ret < 0) {
          error = err != nullptr ? err : "unknown error";
        }
        if (err != nullptr) free(const_cast<char *>(err));
        // The parser error accumulates across calls: start the next load clean.
        rules->m_parserError.str("");
        rules->m_parserError.clear();
      } catch (const std::exception &e) {
        ret = -1;
        error = e.what();
      } catch (...) {
        ret = -1;
        error = "unknown exception while loading rules";
      }
    }
    if (ret < 0) {
      while (!error.empty() && (error.back() == '\n' || error.back() == '\r')) error.pop_back();
      throw RulesError(env, error.empty() ? "rules could not be loaded" : error);
    }
    ruleCount_ += ret;
    return Napi::Number::New(env, ret);
  }

  Napi::Value AddRules(const Napi::CallbackInfo &info) { return Load(info, false); }
  Napi::Value AddFile(const Napi::CallbackInfo &info) { return Load(info, true); }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    handle_.reset();  // freed now, or when the last open transaction on it is freed
    return info.Env().Undefined();
  }

  Napi::Value GetClosed(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), !handle_); }
  Napi::Value GetRuleCount(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), ruleCount_); }

  std::shared_ptr<RulesHandle> handle_;
  double ruleCount_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Transaction

enum Stage {
  kNew = 0,
  kConnection,
  kUri,
  kRequestHeaders,
  kRequestBody,
  kResponseHeaders,
  kResponseBody,
  kLogging,
};

const char *StageName(int s) {
  switch (s) {
    case kNew: return "new";
    case kConnection: return "connection";
    case kUri: return "uri";
    case kRequestHeaders: return "requestHeaders";
    case kRequestBody: return "requestBody";
    case kResponseHeaders: return "responseHeaders";
    case kResponseBody: return "responseBody";
    case kLogging: return "logging";
  }
  return "?";
}

class TransactionWrap : public Napi::ObjectWrap<TransactionWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Transaction",
        {
            InstanceMethod<&TransactionWrap::ProcessConnection>("processConnection"),
            InstanceMethod<&TransactionWrap::ProcessUri>("processUri"),
            InstanceMethod<&TransactionWrap::AddRequestHeader>("addRequestHeader"),
            InstanceMethod<&TransactionWrap::AddRequestHeaders>("addRequestHeaders"),
            InstanceMethod<&TransactionWrap::ProcessRequestHeaders>("processRequestHeaders"),
            InstanceMethod<&TransactionWrap::AppendRequestBody>("appendRequestBody"),
            InstanceMethod<&TransactionWrap::ProcessRequestBody>("processRequestBody"),
            InstanceMethod<&TransactionWrap::AddResponseHeader>("addResponseHeader"),
            InstanceMethod<&TransactionWrap::AddResponseHeaders>("addResponseHeaders"),
            InstanceMethod<&TransactionWrap::ProcessResponseHeaders>("processResponseHeaders"),
            InstanceMethod<&TransactionWrap::AppendResponseBody>("appendResponseBody"),
            InstanceMethod<&TransactionWrap::ProcessResponseBody>("processResponseBody"),
            InstanceMethod<&TransactionWrap::ProcessLogging>("processLogging"),
            InstanceMethod<&TransactionWrap::UpdateStatusCode>("updateStatusCode"),
            InstanceMethod<&TransactionWrap::Intervention>("intervention"),
            InstanceMethod<&TransactionWrap::MatchedRules>("matchedRules"),
            InstanceMethod<&TransactionWrap::RemoveRuleById>("removeRuleById"),
            InstanceMethod<&TransactionWrap::RemoveRuleTargetById>("removeRuleTargetById"),
            InstanceMethod<&TransactionWrap::SetRuleEngine>("setRuleEngine"),
            InstanceMethod<&TransactionWrap::SetVariable>("setVariable"),
            InstanceMethod<&TransactionWrap::GetVariable>("getVariable"),
            InstanceMethod<&TransactionWrap::Close>("close"),
            InstanceAccessor<&TransactionWrap::GetId>("id"),
            InstanceAccessor<&TransactionWrap::GetStage>("stage"),
            InstanceAccessor<&TransactionWrap::GetClosed>("closed"),
            InstanceAccessor<&TransactionWrap::GetRequestBodyLength>("requestBodyLength"),
        });
  }

  explicit TransactionWrap(const Napi::CallbackInfo &info) : Napi::ObjectWrap<TransactionWrap>(info) {
    Napi::Env env = info.Env();
    Addon *addon = GetAddon(env);
    if (info.Length() < 1 || !info[0].IsObject() ||
        !info[0].As<Napi::Object>().InstanceOf(addon->ruleSetCtor.Value())) {
      throw Napi::TypeError::New(env, "new Transaction(ruleSet: RuleSet, id?: string)");
    }
    RuleSetWrap *rs = RuleSetWrap::Unwrap(info[0].As<Napi::Object>());
    rules_ = rs->Handle();
    if (!rules_) throw StateError(env, "RuleSet is closed");
    std::string id;
    if (info.Length() >= 2 && !info[1].IsUndefined() && !info[1].IsNull()) {
      if (!info[1].IsString()) throw Napi::TypeError::New(env, "transaction id must be a string");
      id = info[1].As<Napi::String>().Utf8Value();
      if (id.empty() || id.size() > 256 || id.find('\0') != std::string::npos)
        throw Napi::TypeError::New(env, "transaction id must be 1-256 characters without NUL");
    }
    try {
      ModSecurity *msc = addon->Msc();
      if (id.empty()) {
        tx_ = modsecurity::msc_new_transaction(msc, rules_->rules, nullptr);
      } else {
        std::vector<char> idBuf(id.begin(), id.end());
        idBuf.push_back('\0');
        tx_ = modsecurity::msc_new_transaction_with_id(msc, rules_->rules, idBuf.data(), nullptr);
      }
    } catch (const std::exception &e) {
      tx_ = nullptr;
      rules_.reset();
      throw Napi::Error::New(env, std::string("msc_new_transaction: ") + e.what());
    }
  }

  ~TransactionWrap() override { Free(); }

 private:
  void Free() {
    if (tx_ != nullptr) {
      try {
        modsecurity::msc_transaction_cleanup(tx_);
      } catch (...) {
      }
      tx_ = nullptr;
    }
    rules_.reset();
  }

  void Require(Napi::Env env, const char *method, int minStage, int maxStage) {
    if (tx_ == nullptr) throw StateError(env, std::string(method) + ": transaction is closed");
    if (stage_ < minStage || stage_ > maxStage) {
      throw StateError(env, std::string(method) + ": not allowed in stage '" + StageName(stage_) + "'");
    }
  }

  template <typename F>
  int Call(Napi::Env env, const char *what, F fn) {
    try {
      return fn();
    } catch (const std::exception &e) {
      throw Napi::Error::New(env, std::string(what) + ": " + e.what());
    } catch (...) {
      throw Napi::Error::New(env, std::string(what) + ": unknown exception");
    }
  }

  std::string BytesArg(const Napi::CallbackInfo &info, size_t i, const char *what) {
    std::string out;
    if (i >= info.Length() || !ValueToBytes(info[i], &out)) {
      throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string or a Buffer");
    }
    return out;
  }

  static std::string NoNul(std::string s) {
    // ModSecurity's C API takes NUL-terminated strings for these: cut at the first NUL.
    size_t p = s.find('\0');
    if (p != std::string::npos) s.resize(p);
    return s;
  }

  int PortArg(const Napi::CallbackInfo &info, size_t i) {
    if (i >= info.Length() || !info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), "port must be a number");
    double d = info[i].As<Napi::Number>().DoubleValue();
    if (!(d >= 0 && d <= 65535)) throw Napi::RangeError::New(info.Env(), "port must be 0-65535");
    return static_cast<int>(d);
  }

  Napi::Value ProcessConnection(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processConnection", kNew, kNew);
    std::string client = NoNul(BytesArg(info, 0, "clientIp"));
    int cport = PortArg(info, 1);
    std::string server = NoNul(BytesArg(info, 2, "serverIp"));
    int sport = PortArg(info, 3);
    stage_ = kConnection;
    Call(env, "processConnection", [&] {
      return modsecurity::msc_process_connection(tx_, client.c_str(), cport, server.c_str(), sport);
    });
    return env.Undefined();
  }

  Napi::Value ProcessUri(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processUri", kConnection, kConnection);
    std::string uri = NoNul(BytesArg(info, 0, "uri"));
    std::string method = NoNul(BytesArg(info, 1, "method"));
    std::string version = NoNul(BytesArg(info, 2, "httpVersion"));
    stage_ = kUri;
    Call(env, "processUri", [&] {
      return modsecurity::msc_process_uri(tx_, uri.c_str(), method.c_str(), version.c_str());
    });
    return env.Undefined();
  }

  void AddHeaderPair(Napi::Env env, bool request, const std::string &name, const std::string &value) {
    Call(env, request ? "addRequestHeader" : "addResponseHeader", [&] {
      const unsigned char *k = reinterpret_cast<const unsigned char *>(name.data());
      const unsigned char *v = reinterpret_cast<const unsigned char *>(value.data());
      return request ? modsecurity::msc_add_n_request_header(tx_, k, name.size(), v, value.size())
                     : modsecurity::msc_add_n_response_header(tx_, k, name.size(), v, value.size());
    });
  }

  void AddHeaders(const Napi::CallbackInfo &info, bool request) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsArray())
      throw Napi::TypeError::New(env, "headers must be an array of [name, value] pairs");
    Napi::Array list = info[0].As<Napi::Array>();
    uint32_t n = list.Length();
    std::vector<std::pair<std::string, std::string>> pairs;
    pairs.reserve(n);
    for (uint32_t i = 0; i < n; i++) {
      Napi::Value item = list.Get(i);
      if (!item.IsArray()) throw Napi::TypeError::New(env, "each header must be a [name, value] pair");
      Napi::Array pair = item.As<Napi::Array>();
      if (pair.Length() < 2) throw Napi::TypeError::New(env, "each header must be a [name, value] pair");
      std::string name, value;
      if (!ValueToBytes(pair.Get(0u), &name) || !ValueToBytes(pair.Get(1u), &value))
        throw Napi::TypeError::New(env, "header names and values must be strings or Buffers");
      pairs.emplace_back(std::move(name), std::move(value));
    }
    for (auto &p : pairs) AddHeaderPair(env, request, p.first, p.second);
  }

  Napi::Value AddRequestHeader(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "addRequestHeader", kUri, kUri);
    std::string name = BytesArg(info, 0, "header name");
    std::string value = BytesArg(info, 1, "header value");
    AddHeaderPair(env, true, name, value);
    return env.Undefined();
  }

  Napi::Value AddRequestHeaders(const Napi::CallbackInfo &info) {
    Require(info.Env(), "addRequestHeaders", kUri, kUri);
    AddHeaders(info, true);
    return info.Env().Undefined();
  }

  Napi::Value ProcessRequestHeaders(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processRequestHeaders", kUri, kUri);
    stage_ = kRequestHeaders;
    Call(env, "processRequestHeaders", [&] { return modsecurity::msc_process_request_headers(tx_); });
    return env.Undefined();
  }

  Napi::Value AppendRequestBody(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "appendRequestBody", kRequestHeaders, kRequestHeaders);
    std::string body = BytesArg(info, 0, "body");
    int ret = Call(env, "appendRequestBody", [&] {
      return modsecurity::msc_append_request_body(tx_, reinterpret_cast<const unsigned char *>(body.data()),
                                                  body.size());
    });
    return Napi::Boolean::New(env, ret != 0);
  }

  Napi::Value ProcessRequestBody(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processRequestBody", kRequestHeaders, kRequestHeaders);
    stage_ = kRequestBody;
    Call(env, "processRequestBody", [&] { return modsecurity::msc_process_request_body(tx_); });
    return env.Undefined();
  }

  Napi::Value AddResponseHeader(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "addResponseHeader", kRequestBody, kRequestBody);
    std::string name = BytesArg(info, 0, "header name");
    std::string value = BytesArg(info, 1, "header value");
    AddHeaderPair(env, false, name, value);
    return env.Undefined();
  }

  Napi::Value AddResponseHeaders(const Napi::CallbackInfo &info) {
    Require(info.Env(), "addResponseHeaders", kRequestBody, kRequestBody);
    AddHeaders(info, false);
    return info.Env().Undefined();
  }

  Napi::Value ProcessResponseHeaders(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processResponseHeaders", kRequestBody, kRequestBody);
    if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "status must be a number");
    double status = info[0].As<Napi::Number>().DoubleValue();
    if (!(status >= 0 && status <= 999)) throw Napi::RangeError::New(env, "status must be 0-999");
    std::string protocol = "HTTP/1.1";
    if (info.Length() >= 2 && !info[1].IsUndefined()) protocol = NoNul(BytesArg(info, 1, "protocol"));
    stage_ = kResponseHeaders;
    Call(env, "processResponseHeaders", [&] {
      return modsecurity::msc_process_response_headers(tx_, static_cast<int>(status), protocol.c_str());
    });
    return env.Undefined();
  }

  Napi::Value AppendResponseBody(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "appendResponseBody", kResponseHeaders, kResponseHeaders);
    std::string body = BytesArg(info, 0, "body");
    int ret = Call(env, "appendResponseBody", [&] {
      return modsecurity::msc_append_response_body(tx_, reinterpret_cast<const unsigned char *>(body.data()),
                                                   body.size());
    });
    return Napi::Boolean::New(env, ret != 0);
  }

  Napi::Value ProcessResponseBody(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processResponseBody", kResponseHeaders, kResponseHeaders);
    stage_ = kResponseBody;
    Call(env, "processResponseBody", [&] { return modsecurity::msc_process_response_body(tx_); });
    return env.Undefined();
  }

  Napi::Value ProcessLogging(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "processLogging", kConnection, kResponseBody);
    stage_ = kLogging;
    Call(env, "processLogging", [&] { return modsecurity::msc_process_logging(tx_); });
    return env.Undefined();
  }

  Napi::Value UpdateStatusCode(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "updateStatusCode", kNew, kLogging);
    if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "status must be a number");
    double status = info[0].As<Napi::Number>().DoubleValue();
    if (!(status >= 0 && status <= 999)) throw Napi::RangeError::New(env, "status must be 0-999");
    Call(env, "updateStatusCode", [&] { return modsecurity::msc_update_status_code(tx_, static_cast<int>(status)); });
    return env.Undefined();
  }

  // The pending intervention, or null. Reading it clears it inside ModSecurity (so the next phases
  // run again, as a connector that logs instead of blocking expects).
  Napi::Value Intervention(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "intervention", kNew, kLogging);
    ModSecurityIntervention it;
    it.status = 200;
    it.pause = 0;
    it.url = nullptr;
    it.log = nullptr;
    it.disruptive = 0;
    int disruptive = 0;
    try {
      disruptive = modsecurity::msc_intervention(tx_, &it);
    } catch (...) {
      if (it.url) free(it.url);
      if (it.log) free(it.log);
      throw Napi::Error::New(env, "msc_intervention: exception");
    }
    Napi::Value result = env.Null();
    if (disruptive) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("status", Napi::Number::New(env, it.status));
      o.Set("disruptive", Napi::Boolean::New(env, it.disruptive != 0));
      o.Set("pause", Napi::Number::New(env, it.pause));
      o.Set("url", it.url ? BytesToString(env, it.url).As<Napi::Value>() : env.Null());
      o.Set("log", it.log ? BytesToString(env, it.log).As<Napi::Value>() : env.Null());
      result = o;
    }
    if (it.url) free(it.url);
    if (it.log) free(it.log);
    return result;
  }

  // Every rule match logged so far (rules with `nolog` are not there), in match order, from index
  // `from` on (default 0).
  Napi::Value MatchedRules(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "matchedRules", kNew, kLogging);
    size_t from = 0;
    if (info.Length() >= 1 && info[0].IsNumber()) {
      double d = info[0].As<Napi::Number>().DoubleValue();
      if (d > 0) from = static_cast<size_t>(d);
    }
    bool withLog = info.Length() >= 2 && info[1].ToBoolean().Value();
    Napi::Array out = Napi::Array::New(env);
    try {
      size_t index = 0;
      uint32_t k = 0;
      for (const RuleMessage &rm : tx_->m_rulesMessages) {
        if (index++ < from) continue;
        Napi::Object o = Napi::Object::New(env);
        o.Set("id", Napi::Number::New(env, static_cast<double>(rm.m_ruleId)));
        o.Set("phase", Napi::Number::New(env, rm.m_phase));
        o.Set("message", BytesToString(env, rm.m_message));
        o.Set("data", BytesToString(env, rm.m_data));
        o.Set("match", BytesToString(env, rm.m_match));
        bool hasSeverity = rm.m_rule != nullptr && rm.m_rule->hasSeverity();
        o.Set("severity", hasSeverity ? Napi::Number::New(env, rm.m_severity).As<Napi::Value>() : env.Null());
        Napi::Array tags = Napi::Array::New(env, rm.m_tags.size());
        uint32_t t = 0;
        for (const std::string &tag : rm.m_tags) tags.Set(t++, BytesToString(env, tag));
        o.Set("tags", tags);
        o.Set("disruptive", Napi::Boolean::New(env, rm.m_isDisruptive));
        o.Set("file", rm.m_ruleFile ? BytesToString(env, *rm.m_ruleFile).As<Napi::Value>() : env.Null());
        o.Set("line", Napi::Number::New(env, rm.m_ruleLine));
        o.Set("rev", BytesToString(env, rm.m_rev));
        o.Set("ver", BytesToString(env, rm.m_ver));
        o.Set("maturity", Napi::Number::New(env, rm.m_maturity));
        o.Set("accuracy", Napi::Number::New(env, rm.m_accuracy));
        o.Set("reference", BytesToString(env, rm.m_reference));
        if (withLog) {
          // The error-log line nginx/Apache print for this match ([id "..."] [msg "..."] ...).
          o.Set("log", BytesToString(env, RuleMessage::log(&rm, 0)));
        }
        out.Set(k++, o);
      }
    } catch (const Napi::Error &) {
      throw;
    } catch (const std::exception &e) {
      throw Napi::Error::New(env, std::string("matchedRules: ") + e.what());
    }
    return out;
  }

  Napi::Value RemoveRuleById(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "removeRuleById", kNew, kResponseBody);
    if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "rule id must be a number");
    double id = info[0].As<Napi::Number>().DoubleValue();
    if (!(id >= 0 && id <= 2147483647)) throw Napi::RangeError::New(env, "rule id out of range");
    // What ctl:ruleRemoveById does (actions/ctl/rule_remove_by_id.cc).
    tx_->m_ruleRemoveById.push_back(static_cast<int>(id));
    return env.Undefined();
  }

  Napi::Value RemoveRuleTargetById(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "removeRuleTargetById", kNew, kResponseBody);
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsString())
      throw Napi::TypeError::New(env, "removeRuleTargetById(id: number, target: string)");
    double id = info[0].As<Napi::Number>().DoubleValue();
    if (!(id >= 0 && id <= 2147483647)) throw Napi::RangeError::New(env, "rule id out of range");
    std::string target;
    ValueToBytes(info[1], &target);
    // What ctl:ruleRemoveTargetById does: ModSecurity compares the target with the variable's
    // full name ("ARGS", "REQUEST_COOKIES") and with each value's "COLLECTION:key", byte for byte.
    tx_->m_ruleRemoveTargetById.emplace_back(static_cast<int>(id), target);
    return env.Undefined();
  }

  Napi::Value SetRuleEngine(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "setRuleEngine", kNew, kResponseBody);
    if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "setRuleEngine(mode: string)");
    std::string mode = info[0].As<Napi::String>().Utf8Value();
    if (mode == "On") {
      tx_->m_secRuleEngine = RulesSetProperties::EnabledRuleEngine;
    } else if (mode == "DetectionOnly") {
      tx_->m_secRuleEngine = RulesSetProperties::DetectionOnlyRuleEngine;
    } else if (mode == "Off") {
      tx_->m_secRuleEngine = RulesSetProperties::DisabledRuleEngine;
    } else {
      throw Napi::RangeError::New(env, "rule engine mode must be On, DetectionOnly or Off");
    }
    return env.Undefined();
  }

  // TX collection (what `setvar:tx.name=value` writes). Set before processConnection, a value is
  // seen by every rule, as if crs-setup.conf had set it for this transaction only.
  Napi::Value SetVariable(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "setVariable", kNew, kResponseBody);
    if (info.Length() < 2 || !info[0].IsString()) throw Napi::TypeError::New(env, "setVariable(name: string, value)");
    std::string name = info[0].As<Napi::String>().Utf8Value();
    if (name.empty() || name.size() > 256) throw Napi::RangeError::New(env, "variable name must be 1-256 characters");
    std::string value;
    if (info[1].IsNumber()) {
      double d = info[1].As<Napi::Number>().DoubleValue();
      if (d == static_cast<double>(static_cast<long long>(d))) {
        value = std::to_string(static_cast<long long>(d));
      } else {
        value = std::to_string(d);
      }
    } else if (!ValueToBytes(info[1], &value)) {
      throw Napi::TypeError::New(env, "variable value must be a string, number or Buffer");
    }
    Call(env, "setVariable", [&] {
      tx_->m_collections.m_tx_collection->storeOrUpdateFirst(name, value);
      return 1;
    });
    return env.Undefined();
  }

  Napi::Value GetVariable(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    Require(env, "getVariable", kNew, kLogging);
    if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "getVariable(name: string)");
    std::string name = info[0].As<Napi::String>().Utf8Value();
    std::unique_ptr<std::string> value;
    try {
      value = tx_->m_collections.m_tx_collection->resolveFirst(name);
    } catch (const std::exception &e) {
      throw Napi::Error::New(env, std::string("getVariable: ") + e.what());
    }
    if (!value) return env.Null();
    return BytesToString(env, *value);
  }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    Free();
    return info.Env().Undefined();
  }

  Napi::Value GetId(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (tx_ == nullptr || !tx_->m_id) return env.Null();
    return BytesToString(env, *tx_->m_id);
  }

  Napi::Value GetStage(const Napi::CallbackInfo &info) {
    return Napi::String::New(info.Env(), tx_ == nullptr ? "closed" : StageName(stage_));
  }

  Napi::Value GetClosed(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), tx_ == nullptr); }

  Napi::Value GetRequestBodyLength(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (tx_ == nullptr) return Napi::Number::New(env, 0);
    size_t n = 0;
    try {
      n = modsecurity::msc_get_request_body_length(tx_);
    } catch (...) {
    }
    return Napi::Number::New(env, static_cast<double>(n));
  }

  modsecurity::Transaction *tx_ = nullptr;
  std::shared_ptr<RulesHandle> rules_;
  int stage_ = kNew;
};

Napi::Value WhoAmI(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const char *who = modsecurity::msc_who_am_i(GetAddon(env)->Msc());
  return Napi::String::New(env, who ? who : "");
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  Addon *addon = new Addon();
  env.SetInstanceData<Addon>(addon);  // deleted with the environment (the ModSecurity it made is not)
  Napi::Function ruleSet = RuleSetWrap::Define(env);
  Napi::Function transaction = TransactionWrap::Define(env);
  addon->ruleSetCtor = Napi::Persistent(ruleSet);
  addon->transactionCtor = Napi::Persistent(transaction);
  exports.Set("RuleSet", ruleSet);
  exports.Set("Transaction", transaction);
  exports.Set("version", Napi::String::New(env, MODSECURITY_VERSION));
  exports.Set("whoAmI", Napi::Function::New(env, WhoAmI, "whoAmI"));
  return exports;
}

}  // namespace

NODE_API_MODULE(NODE_GYP_MODULE_NAME, Init)
