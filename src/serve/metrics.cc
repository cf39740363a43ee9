// Prometheus text exposition of the server's counters (metrics.h).
#include "serve/metrics.h"

#include "core/status.h"

namespace kiln::serve {

Metrics::Metrics(int devices) : device_busy_ns_(static_cast<size_t>(devices)) {}

ModelMetrics& Metrics::model(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& m = models_[name];
  if (!m) m = std::make_unique<ModelMetrics>();
  return *m;
}

void Metrics::count_http(int status) {
  size_t c = static_cast<size_t>(status / 100);
  if (c < http_by_class_.size()) ++http_by_class_[c];
}

void Metrics::record_batch(ModelMetrics& m, int64_t rows, int64_t compute_ns) {
  ++m.executions;
  m.compute_ns += compute_ns;
  m.batch_rows += rows;
  size_t b = 0;
  while (b < kBatchBuckets.size() && rows > kBatchBuckets[b]) ++b;
  ++m.batch_buckets[b];
}

std::string Metrics::text() const {
  auto seconds = [](int64_t ns) { return str_format("%.9f", static_cast<double>(ns) * 1e-9); };
  std::string s;
  auto family = [&](const char* name, const char* type, const char* help) {
    s += str_format("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  };
  std::lock_guard lock(mutex_);
  auto per_model = [&](const char* name, const char* type, const char* help, auto value) {
    family(name, type, help);
    for (const auto& [model, m] : models_) s += str_format("%s{model=\"%s\"} %s\n", name, model.c_str(), value(*m).c_str());
  };
  auto count = [](const std::atomic<int64_t>& v) { return std::to_string(v.load()); };
  per_model("kiln_inference_requests_total", "counter", "Inference requests answered with outputs.",
            [&](const ModelMetrics& m) { return count(m.requests); });
  per_model("kiln_inference_failures_total", "counter", "Inference requests of the model answered with an error.",
            [&](const ModelMetrics& m) { return count(m.failures); });
  per_model("kiln_inference_rejected_total", "counter", "Inference requests refused (503) because the queue was full.",
            [&](const ModelMetrics& m) { return count(m.rejected); });
  per_model("kiln_inference_timeouts_total", "counter", "Requests dropped from the queue when their timeout passed.",
            [&](const ModelMetrics& m) { return count(m.timed_out); });
  per_model("kiln_inference_executions_total", "counter", "Model executions (one per batch).",
            [&](const ModelMetrics& m) { return count(m.executions); });
  per_model("kiln_inference_queue_seconds_total", "counter", "Time requests waited in the queue, summed.",
            [&](const ModelMetrics& m) { return seconds(m.queue_ns.load()); });
  per_model("kiln_inference_compute_seconds_total", "counter",
            "Time of executions (input copy, run, output copy), summed.",
            [&](const ModelMetrics& m) { return seconds(m.compute_ns.load()); });
  family("kiln_inference_batch_size", "histogram", "Rows per execution.");
  for (const auto& [model, m] : models_) {
    int64_t cumulative = 0;
    for (size_t b = 0; b <= kBatchBuckets.size(); ++b) {
      cumulative += m->batch_buckets[b].load();
      std::string le = b < kBatchBuckets.size() ? std::to_string(kBatchBuckets[b]) : "+Inf";
      s += str_format("kiln_inference_batch_size_bucket{model=\"%s\",le=\"%s\"} %lld\n", model.c_str(), le.c_str(),
                      static_cast<long long>(cumulative));
    }
    s += str_format("kiln_inference_batch_size_sum{model=\"%s\"} %lld\n", model.c_str(),
                    static_cast<long long>(m->batch_rows.load()));
    s += str_format("kiln_inference_batch_size_count{model=\"%s\"} %lld\n", model.c_str(),
                    static_cast<long long>(m->executions.load()));
  }
  family("kiln_device_busy_seconds_total", "counter", "Time each device spent executing batches.");
  for (size_t d = 0; d < device_busy_ns_.size(); ++d)
    s += str_format("kiln_device_busy_seconds_total{device=\"%zu\"} %s\n", d, seconds(device_busy_ns_[d].load()).c_str());
  family("kiln_http_responses_total", "counter", "HTTP responses by status class.");
  for (size_t c = 2; c < http_by_class_.size(); ++c)
    s += str_format("kiln_http_responses_total{code=\"%zuxx\"} %lld\n", c, static_cast<long long>(http_by_class_[c].load()));
  return s;
}

}  // namespace kiln::serve
