import Foundation
import Jobs
import Outbound
import Pipeline

/// The JSON shapes of the API (see openapi.yaml); times are ISO 8601 strings.
enum APIModels {
    struct UploadResource: Encodable {
        let id: String
        let filename: String
        let contentType: String?
        let size: Int
        let sha256: String
        let createdAt: String
        let tracks: [Track]

        init(_ upload: Upload) {
            id = upload.id
            filename = upload.filename
            contentType = upload.contentType
            size = upload.size
            sha256 = upload.sha256
            createdAt = timestamp(upload.createdAt)
            tracks = upload.tracks
        }
    }

    struct InputResource: Encodable {
        let id: String
        let filename: String?
        /// Null while an input given by URL is not fetched yet.
        let size: Int?
        let tracks: [Track]
        /// Where an input given by URL comes from (credentials redacted); absent for uploads.
        let url: String?

        private enum CodingKeys: String, CodingKey { case id, filename, size, tracks, url }

        /// `size` is null, not left out, while unknown (as the API's description says).
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encodeIfPresent(filename, forKey: .filename)
            try container.encode(size, forKey: .size)
            try container.encode(tracks, forKey: .tracks)
            try container.encodeIfPresent(url, forKey: .url)
        }
    }

    struct OutputResource: Encodable {
        let size: Int
        let mimeType: String
        let tracks: [Track]
        /// The main file: the output itself, or a ladder's HLS master playlist.
        let url: String
        /// Every file of the output folder, each at `/v1/jobs/{id}/output/{path}` (absent for older jobs, and in
        /// the job list: a ladder has thousands, and every listed job's would be sent on every reading of the list).
        let files: [FileResource]?
        /// How many files the output folder has (absent for older jobs).
        let fileCount: Int?
        /// A ladder's DASH manifest, the poster, the storyboard's WebVTT track, when written.
        let dash: String?
        let poster: String?
        let storyboard: String?

        init(job: Job, size: Int, listsFiles: Bool) {
            let tracks = job.outputTracks ?? []
            self.size = size
            mimeType = job.settings.container.mimeType(hasVideo: tracks.contains { $0.mediaType == .video })
            self.tracks = tracks
            let base = "/v1/jobs/\(job.id)/output"
            let files = job.outputFiles
            url = files == nil || !job.settings.container.isSegmented ? base : base + "/" + job.settings.container.mainFileName
            self.files = listsFiles ? files?.map { FileResource(path: $0.path, size: $0.size, mimeType: $0.mimeType, url: base + "/" + $0.path) } : nil
            fileCount = files?.count
            func link(_ name: String) -> String? { files?.contains { $0.path == name } == true ? base + "/" + name : nil }
            dash = link("manifest.mpd")
            poster = link("poster.jpg")
            storyboard = link("storyboard.vtt")
        }
    }

    struct FileResource: Encodable {
        let path: String
        let size: Int
        let mimeType: String
        let url: String
    }

    struct ErrorDetail: Encodable {
        let code: String
        let message: String
    }

    /// A job's settings as the API shows them: as read, or as stored when they no longer read (such a job fails
    /// with `invalid_settings`; showing the defaults instead would misstate what was asked for).
    enum JobSettings: Encodable {
        case settings(TranscodeSettings)
        case stored(String)

        func encode(to encoder: any Encoder) throws {
            switch self {
            case .settings(let settings):
                try settings.encode(to: encoder)
            case .stored(let text):
                if let value = try? JSONValue.parse(Data(text.utf8)) {
                    try value.encode(to: encoder)
                } else {
                    var container = encoder.singleValueContainer()
                    try container.encode(text)
                }
            }
        }
    }

    struct JobResource: Encodable {
        let id: String
        let state: String
        let progress: ProgressReport
        let settings: JobSettings
        let input: InputResource
        let output: OutputResource?
        let error: ErrorDetail?
        let attempts: Int
        let priority: Int
        let createdAt: String
        let startedAt: String?
        let finishedAt: String?
        let webhook: WebhookResource?

        /// `listsFiles` false leaves the output's files out (the job list).
        init(_ job: Job, upload: Upload?, live: TranscodeProgress?, fetch: FetchProgress? = nil, listsFiles: Bool = true) {
            id = job.id
            state = job.state.rawValue
            if job.state == .running && (fetch != nil || upload?.awaitsFetch == true) {
                progress = ProgressReport(fetch: fetch)
            } else {
                progress = live.map(ProgressReport.init) ?? ProgressReport(job: job)
            }
            settings = job.unreadableSettings.map { .stored($0.text) } ?? .settings(job.settings)
            input = InputResource(id: job.inputUpload, filename: upload?.filename, size: upload?.awaitsFetch == true ? nil : upload?.size,
                                  tracks: upload?.tracks ?? [], url: upload?.sourceURL.map(RedactedURL.text))
            if job.state == .succeeded, let size = job.outputSize {
                output = OutputResource(job: job, size: size, listsFiles: listsFiles)
            } else {
                output = nil
            }
            error = job.errorCode.map { ErrorDetail(code: $0, message: job.errorMessage ?? $0) }
            attempts = job.attempts
            priority = job.priority
            createdAt = timestamp(job.createdAt)
            startedAt = job.startedAt.map(timestamp)
            finishedAt = job.finishedAt.map(timestamp)
            webhook = job.webhook.map { WebhookResource(url: RedactedURL.text($0.url), events: $0.events.map(\.rawValue), disabled: $0.disabled) }
        }

        /// Every key is always present; absent values are null.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(state, forKey: .state)
            try container.encode(progress, forKey: .progress)
            try container.encode(settings, forKey: .settings)
            try container.encode(input, forKey: .input)
            try container.encode(output, forKey: .output)
            try container.encode(error, forKey: .error)
            try container.encode(attempts, forKey: .attempts)
            try container.encode(priority, forKey: .priority)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(startedAt, forKey: .startedAt)
            try container.encode(finishedAt, forKey: .finishedAt)
            try container.encode(webhook, forKey: .webhook)
        }

        enum CodingKeys: String, CodingKey {
            case id, state, progress, settings, input, output, error, attempts, priority, createdAt, startedAt, finishedAt, webhook
        }
    }

    /// A job's own webhook, its URL with credentials redacted.
    struct WebhookResource: Encodable {
        let url: String
        let events: [String]
        /// The URL answered 410 Gone: nothing more is sent to it.
        let disabled: Bool
    }

    /// One event on its way to one URL, as `GET /v1/jobs/{id}/webhooks` lists it.
    struct DeliveryResource: Encodable {
        let id: String
        let event: String
        let url: String
        /// `job` (the job's own webhook) or `server` (`--webhook-url`).
        let scope: String
        let state: String
        let attempts: Int
        let lastStatus: Int?
        let lastError: String?
        let nextAttemptAt: String?
        let createdAt: String
        let deliveredAt: String?

        init(_ delivery: WebhookDelivery) {
            id = delivery.id
            event = delivery.event
            url = RedactedURL.text(delivery.url)
            scope = delivery.scope.rawValue
            state = delivery.state.rawValue
            attempts = delivery.attempts
            lastStatus = delivery.lastStatus
            lastError = delivery.lastError
            nextAttemptAt = delivery.state == .pending ? timestamp(delivery.nextAttemptAt) : nil
            createdAt = timestamp(delivery.createdAt)
            deliveredAt = delivery.deliveredAt.map(timestamp)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(event, forKey: .event)
            try container.encode(url, forKey: .url)
            try container.encode(scope, forKey: .scope)
            try container.encode(state, forKey: .state)
            try container.encode(attempts, forKey: .attempts)
            try container.encode(lastStatus, forKey: .lastStatus)
            try container.encode(lastError, forKey: .lastError)
            try container.encode(nextAttemptAt, forKey: .nextAttemptAt)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encode(deliveredAt, forKey: .deliveredAt)
        }

        enum CodingKeys: String, CodingKey {
            case id, event, url, scope, state, attempts, lastStatus, lastError, nextAttemptAt, createdAt, deliveredAt
        }
    }

    struct DeliveryList: Encodable {
        let deliveries: [DeliveryResource]
    }

    struct JobPage: Encodable {
        let jobs: [JobResource]
        /// Cursor for the next page, or null on the last one.
        let next: String?

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(jobs, forKey: .jobs)
            try container.encode(next, forKey: .next)
        }

        enum CodingKeys: String, CodingKey { case jobs, next }
    }

    struct PresetResource: Encodable {
        let name: String
        let summary: String
        let settings: TranscodeSettings
    }

    /// `GET /v1/session`: whether the server asks for a token, and whether this request carries a valid session.
    struct Session: Encodable {
        let required: Bool
        let session: Bool
    }

    struct Status: Encodable {
        let status: String
    }
}

/// Seconds since 1970 as ISO 8601 with milliseconds, UTC.
func timestamp(_ seconds: Double) -> String {
    Date(timeIntervalSince1970: seconds).formatted(
        .iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
}
