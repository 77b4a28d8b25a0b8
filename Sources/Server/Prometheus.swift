import Jobs

/// The `/metrics` page in Prometheus' text format (version 0.0.4).
public enum Prometheus {
    /// `webhookAttempts`: this process's webhook attempts by outcome.
    public static func render(server: ServerMetrics?, queue: JobQueue, webhookAttempts: [String: Int] = [:]) -> String {
        var lines: [String] = []
        func family(_ name: String, _ type: String, _ help: String) {
            lines.append("# HELP \(name) \(help)")
            lines.append("# TYPE \(name) \(type)")
        }
        // What only the store knows is left out when it does not answer: zeros would read as an empty queue (to an
        // alert, or to an autoscaler that then stops workers).
        let counts = try? queue.store.counts()
        let deliveries = counts == nil ? nil : try? queue.store.deliveryCounts()
        family("transcoderd_store_up", "gauge", "Whether the store answered this scrape (1) or not (0: its figures are left out).")
        lines.append("transcoderd_store_up \(counts != nil && deliveries != nil ? 1 : 0)")
        if let counts {
            family("transcoderd_jobs", "gauge", "Jobs in the store by state.")
            for state in JobState.allCases { lines.append("transcoderd_jobs{state=\"\(state.rawValue)\"} \(counts[state] ?? 0)") }
            family("transcoderd_queue_depth", "gauge", "Jobs waiting to run.")
            lines.append("transcoderd_queue_depth \(counts[.queued] ?? 0)")
        }
        family("transcoderd_jobs_running", "gauge", "Jobs running in this process.")
        lines.append("transcoderd_jobs_running \(queue.runningCount)")
        if let deliveries {
            family("transcoderd_webhook_deliveries", "gauge", "Webhook deliveries in the store by state (pending: the webhook queue's depth).")
            for state in ["pending", "delivered", "failed", "disabled"] {
                lines.append("transcoderd_webhook_deliveries{state=\"\(state)\"} \(WebhookDelivery.State(rawValue: state).flatMap { deliveries[$0] } ?? 0)")
            }
        }
        family("transcoderd_webhook_attempts_total", "counter", "Webhook attempts made by this process, by outcome.")
        for outcome in ["delivered", "retry", "failed", "disabled"] {
            lines.append("transcoderd_webhook_attempts_total{outcome=\"\(outcome)\"} \(webhookAttempts[outcome] ?? 0)")
        }
        let stats = queue.statistics
        family("transcoderd_jobs_finished_total", "counter", "Jobs finished by this process, by result.")
        // Every result from the start, at 0 until it happens: a series that appears at its first failure reads as no
        // increase, and an alert on rare failures would never fire.
        for result in Set(["succeeded", "failed", "canceled"]).union(stats.finished.keys).sorted() {
            lines.append("transcoderd_jobs_finished_total{result=\"\(result)\"} \(stats.finished[result] ?? 0)")
        }
        family("transcoderd_frames_encoded_total", "counter", "Video frames encoded by this process.")
        lines.append("transcoderd_frames_encoded_total \(stats.framesEncoded)")
        family("transcoderd_transcode_duration_seconds", "histogram", "Wall time of successful transcodes.")
        for (index, bound) in JobQueue.Statistics.durationBuckets.enumerated() {
            lines.append("transcoderd_transcode_duration_seconds_bucket{le=\"\(bound)\"} \(stats.durationBuckets[index])")
        }
        lines.append("transcoderd_transcode_duration_seconds_bucket{le=\"+Inf\"} \(stats.durationCount)")
        lines.append("transcoderd_transcode_duration_seconds_sum \(stats.durationSum)")
        lines.append("transcoderd_transcode_duration_seconds_count \(stats.durationCount)")
        if let snapshot = server?.snapshot {
            family("transcoderd_http_requests_total", "counter", "HTTP requests by route and status.")
            for (route, statuses) in snapshot.requests.sorted(by: { $0.key < $1.key }) {
                for (status, count) in statuses.sorted(by: { $0.key < $1.key }) {
                    lines.append("transcoderd_http_requests_total{route=\"\(escape(route))\",status=\"\(status)\"} \(count)")
                }
            }
            family("transcoderd_http_request_duration_seconds", "histogram", "Time from request head to the end of the response.")
            for (index, bound) in ServerMetrics.durationBuckets.enumerated() {
                lines.append("transcoderd_http_request_duration_seconds_bucket{le=\"\(bound)\"} \(snapshot.durationBuckets[index])")
            }
            lines.append("transcoderd_http_request_duration_seconds_bucket{le=\"+Inf\"} \(snapshot.durationCount)")
            lines.append("transcoderd_http_request_duration_seconds_sum \(snapshot.durationSum)")
            lines.append("transcoderd_http_request_duration_seconds_count \(snapshot.durationCount)")
            family("transcoderd_bytes_uploaded_total", "counter", "Request body bytes received.")
            lines.append("transcoderd_bytes_uploaded_total \(snapshot.bytesReceived)")
            family("transcoderd_bytes_served_total", "counter", "Response body bytes sent.")
            lines.append("transcoderd_bytes_served_total \(snapshot.bytesSent)")
            family("transcoderd_sse_clients", "gauge", "Open Server-Sent Events streams.")
            lines.append("transcoderd_sse_clients \(snapshot.openStreams)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }
}
