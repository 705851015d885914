// Streams, events, graphs (capture and replay), kernel launches and errors of the stand-in CUDA runtime.
// Rules quoted from the CUDA runtime API reference (cuda_runtime_api.h).
#include <chrono>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "standin.h"

using lenet::emu::Work;

struct CUstream_st {
    std::vector<Work> queue;                  // enqueued, not yet run
    std::vector<Work>* capture = nullptr;     // the graph being captured, or none
    bool invalidated = false;                 // a capture rule was broken: EndCapture returns no graph
    int error = 0;                            // first failure of queued work, returned by the next sync
    std::string error_rule;
};
struct CUevent_st {
    unsigned flags = 0;
    bool recorded = false, done = false;
    std::chrono::steady_clock::time_point at;
};
struct CUgraph_st {
    std::vector<Work> nodes;
};
struct CUgraphExec_st {
    std::vector<Work> nodes;
};

namespace lenet::emu {

namespace {
CUstream_st legacy;                 // stream 0
std::set<CUstream_st*> streams;     // live streams
thread_local cudaError_t last_error = cudaSuccess;

CUstream_st& state(cudaStream_t s) { return s ? *s : legacy; }

// Runs the queued work of one stream; the first refusal stops it and is kept for the next sync.
void run(CUstream_st& st) {
    std::vector<Work> work;
    work.swap(st.queue);
    for (Work& w : work) {
        if (st.error) break;
        try {
            w();
        } catch (const Refusal& r) {
            st.error = r.status;
            st.error_rule = r.rule;
        }
    }
}

// The error kept by run(), reported once (as the refusal of `call`).
void report(CUstream_st& st) {
    if (!st.error) return;
    const int status = st.error;
    st.error = 0;
    refuse(status, st.error_rule);
}

// The CUDA runtime's calls: a failure is also "the last error" (cudaGetLastError).
template <class Body>
cudaError_t cuda(const char* call, Body body) {
    const cudaError_t s = api<cudaError_t>(call, body);
    if (s != cudaSuccess) last_error = s;
    return s;
}

std::unordered_map<const void*, std::pair<std::string, Launch>>& kernels() {
    static std::unordered_map<const void*, std::pair<std::string, Launch>> k;
    return k;
}
}  // namespace

void enqueue(cudaStream_t stream, Work work, const char* call) {
    CUstream_st& st = state(stream);
    auto named = [w = std::move(work), call] {
        try {
            w();
        } catch (const Refusal& r) {
            refuse(r.status, std::string(call) + " (queued): " + r.rule);
        }
    };
    if (st.capture)
        st.capture->push_back(named);
    else
        st.queue.push_back(named);
}

bool capturing(cudaStream_t stream) { return state(stream).capture != nullptr; }

bool capturing_any() {
    for (CUstream_st* s : streams)
        if (s->capture) return true;
    return false;
}

void forbid_during_capture(const char* why, int status) {
    if (!capturing_any()) return;
    for (CUstream_st* s : streams)   // "a violation of the rules of stream capture" invalidates the capture
        if (s->capture) s->invalidated = true;
    refuse(status, std::string(why) + " while a stream capture is under way (cudaStreamCaptureModeThreadLocal: "
                                      "the capturing thread is prohibited from potentially unsafe API calls)");
}

void need_stream(cudaStream_t stream, int status) {
    require(!stream || streams.count(stream), status, "the stream is not a live stream (never created, or destroyed)");
}

void synchronize_all() {
    run(legacy);
    for (CUstream_st* s : streams) run(*s);
}

void register_kernel(const void* function, const char* name, Launch launch) {
    kernels()[function] = {name, std::move(launch)};
}

const Launch* find_kernel(const void* function) {
    auto it = kernels().find(function);
    return it == kernels().end() ? nullptr : &it->second.second;
}

}  // namespace lenet::emu

using namespace lenet::emu;

// --- streams -------------------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    return cuda("cudaStreamCreateWithFlags", [&] {
        require(s != nullptr, cudaErrorInvalidValue, "pStream is NULL");
        require(flags == cudaStreamDefault || flags == cudaStreamNonBlocking, cudaErrorInvalidValue,
                "flags must be cudaStreamDefault or cudaStreamNonBlocking");
        *s = new CUstream_st;
        streams.insert(*s);
        born(*s, "stream");
    });
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    return cuda("cudaStreamDestroy", [&] {
        die(s, "stream", cudaErrorInvalidResourceHandle, "cudaStreamDestroy");
        require(!s->capture, cudaErrorStreamCaptureUnsupported, "the stream is capturing");
        run(*s);   // "resources ... released automatically once the device has completed all work in stream"
        streams.erase(s);
        delete s;
    });
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    return cuda("cudaStreamSynchronize", [&] {
        need_stream(s, cudaErrorInvalidResourceHandle);
        if (capturing(s)) {   // cudaErrorStreamCaptureUnsupported: "not permitted when the stream is capturing"
            state(s).invalidated = true;
            refuse(cudaErrorStreamCaptureUnsupported, "the stream is capturing: synchronising it is not permitted");
        }
        synchronize_all();   // one device: everything queued before this call has run
        report(state(s));
    });
}

// --- events --------------------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    return cuda("cudaEventCreateWithFlags", [&] {
        require(e != nullptr, cudaErrorInvalidValue, "event is NULL");
        require((flags & ~unsigned(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)) == 0,
                cudaErrorInvalidValue, "unknown flags");
        *e = new CUevent_st;
        (*e)->flags = flags;
        born(*e, "event");
    });
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    return cuda("cudaEventDestroy", [&] {
        die(e, "event", cudaErrorInvalidResourceHandle, "cudaEventDestroy");
        delete e;
    });
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    return cuda("cudaEventRecord", [&] {
        need_alive(e, "event", cudaErrorInvalidResourceHandle, "event");
        need_stream(s, cudaErrorInvalidResourceHandle);
        require(!capturing(s), cudaErrorNotSupported, "recording an event into a capture is not implemented by the stand-in");
        e->recorded = true;
        e->done = false;
        enqueue(s, [e] {
            e->at = std::chrono::steady_clock::now();
            e->done = true;
        }, "cudaEventRecord");
    });
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    return cuda("cudaEventSynchronize", [&] {
        need_alive(e, "event", cudaErrorInvalidResourceHandle, "event");
        synchronize_all();
        for (CUstream_st* s : streams) report(*s);
    });
}

// The stand-in's own CPU time between the two events: an emulated run is never GPU performance.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    return cuda("cudaEventElapsedTime", [&] {
        require(ms != nullptr, cudaErrorInvalidValue, "ms is NULL");
        need_alive(start, "event", cudaErrorInvalidResourceHandle, "start");
        need_alive(end, "event", cudaErrorInvalidResourceHandle, "end");
        require(!((start->flags | end->flags) & cudaEventDisableTiming), cudaErrorInvalidResourceHandle,
                "an event was created with cudaEventDisableTiming");
        require(start->recorded && end->recorded, cudaErrorInvalidResourceHandle,
                "cudaEventRecord() has not been called on both events");
        require(start->done && end->done, cudaErrorNotReady, "an event has not completed yet");
        *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
    });
}

// --- graphs ----------------------------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    return cuda("cudaStreamBeginCapture", [&] {
        require(s != nullptr, cudaErrorStreamCaptureUnsupported, "capture may not be initiated in the legacy stream");
        need_stream(s, cudaErrorInvalidResourceHandle);
        require(mode == cudaStreamCaptureModeThreadLocal || mode == cudaStreamCaptureModeGlobal, cudaErrorNotSupported,
                "the stand-in implements the Global and ThreadLocal capture modes only");
        require(!s->capture, cudaErrorIllegalState, "the stream is already capturing");
        s->capture = new std::vector<Work>;
        s->invalidated = false;
    });
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    return cuda("cudaStreamEndCapture", [&] {
        require(graph != nullptr, cudaErrorInvalidValue, "pGraph is NULL");
        need_stream(s, cudaErrorInvalidResourceHandle);
        require(s && s->capture, cudaErrorIllegalState, "the stream is not capturing");
        std::unique_ptr<std::vector<Work>> nodes(s->capture);
        s->capture = nullptr;
        *graph = nullptr;
        // "If capture was invalidated, due to a violation of the rules of stream capture, then a NULL graph"
        require(!s->invalidated, cudaErrorStreamCaptureInvalidated,
                "the capture was invalidated by a call that stream capture does not permit");
        *graph = new CUgraph_st{std::move(*nodes)};
        born(*graph, "graph");
    });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    return cuda("cudaGraphInstantiate", [&] {
        require(exec != nullptr, cudaErrorInvalidValue, "pGraphExec is NULL");
        need_alive(graph, "graph", cudaErrorInvalidValue, "graph");
        require(flags == 0, cudaErrorNotSupported, "the stand-in implements flags = 0 only");
        *exec = new CUgraphExec_st{graph->nodes};   // independent of the graph from now on
        born(*exec, "graph exec");
    });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    return cuda("cudaGraphLaunch", [&] {
        need_alive(exec, "graph exec", cudaErrorInvalidValue, "graphExec");
        need_stream(s, cudaErrorInvalidResourceHandle);
        require(!capturing(s), cudaErrorNotSupported, "launching a graph into a capture is not implemented by the stand-in");
        for (const Work& node : exec->nodes) state(s).queue.push_back(node);   // each node re-reads its buffers
    });
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    return cuda("cudaGraphDestroy", [&] {
        die(g, "graph", cudaErrorInvalidValue, "cudaGraphDestroy");
        delete g;
    });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    return cuda("cudaGraphExecDestroy", [&] {
        die(e, "graph exec", cudaErrorInvalidValue, "cudaGraphExecDestroy");
        delete e;
    });
}

// --- kernels, device, errors -------------------------------------------------------------------------------

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t s) {
    return cuda("cudaLaunchKernel", [&] {
        need_stream(s, cudaErrorInvalidResourceHandle);
        const Launch* launch = find_kernel(func);
        require(launch != nullptr, cudaErrorInvalidDeviceFunction, "func is not a kernel known to the emulator");
        require(args != nullptr, cudaErrorInvalidValue, "args is NULL");
        // cudaErrorInvalidConfiguration beyond the device's limits: checked by the emulator's rules (sm_90)
        enqueue(s, (*launch)(args, grid, block, shared), "cudaLaunchKernel");   // arguments copied now
    });
}

cudaError_t cudaGetLastError() {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int* count) {
    return cuda("cudaGetDeviceCount", [&] {
        require(count != nullptr, cudaErrorInvalidValue, "count is NULL");
        *count = 1;   // the stand-in device
    });
}

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define LENET_NAME(x) \
    case x:           \
        return #x;
        LENET_NAME(cudaSuccess)
        LENET_NAME(cudaErrorInvalidValue)
        LENET_NAME(cudaErrorMemoryAllocation)
        LENET_NAME(cudaErrorInvalidConfiguration)
        LENET_NAME(cudaErrorInvalidMemcpyDirection)
        LENET_NAME(cudaErrorInvalidDeviceFunction)
        LENET_NAME(cudaErrorInvalidResourceHandle)
        LENET_NAME(cudaErrorNotReady)
        LENET_NAME(cudaErrorIllegalAddress)
        LENET_NAME(cudaErrorLaunchFailure)
        LENET_NAME(cudaErrorIllegalState)
        LENET_NAME(cudaErrorNotSupported)
        LENET_NAME(cudaErrorStreamCaptureUnsupported)
        LENET_NAME(cudaErrorStreamCaptureInvalidated)
#undef LENET_NAME
        default:
            return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) { return describe(e, cudaGetErrorName(e), true); }
