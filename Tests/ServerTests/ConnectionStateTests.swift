import Testing
@testable import Server

/// A made-up clock's instant: seconds on a line, so time passes only when a test says so.
struct TestInstant: InstantProtocol {
    var offset: Duration

    static func seconds(_ value: Double) -> TestInstant { TestInstant(offset: .seconds(value)) }

    func advanced(by duration: Duration) -> TestInstant { TestInstant(offset: offset + duration) }
    func duration(to other: TestInstant) -> Duration { other.offset - offset }
    static func < (left: TestInstant, right: TestInstant) -> Bool { left.offset < right.offset }
}

/// The connection's phases and timeouts as a value: no sockets, no clock.
@Suite struct ConnectionStateTests {
    typealias State = ConnectionState<TestInstant>
    static let timeouts = State.Timeouts(header: .seconds(10), idle: .seconds(60), transfer: .seconds(30), heartbeat: .seconds(15))

    private func fresh() -> State { State(now: .seconds(0), timeouts: Self.timeouts) }

    @Test func aKeptAliveRequestGoesRoundAndBack() {
        var state = fresh()
        #expect(state.phase == .idle && state.readsRequests && !state.isBusy(headInProgress: false))
        #expect(state.isBusy(headInProgress: true), "part of a head is a request under way")
        state.headBytesArrived(at: .seconds(1))
        state.headComplete()
        #expect(state.phase == .readingBody && state.readsRequests && state.headStarted == nil)
        state.bodyComplete()
        #expect(state.phase == .awaitingResponse && state.isRespondingOrWaiting && !state.readsRequests)
        state.responseStarted(streaming: false, at: .seconds(2))
        #expect(state.phase == .writing && !state.canStartResponse, "one response per request")
        let next = state.responseWritten(closeAfter: false, requestRead: true, at: .seconds(3))
        #expect(next == .readNext && state.phase == .idle && state.lastActivity == .seconds(3))
    }

    @Test func whatFollowsAResponseDependsOnConnectionCloseAndUnreadBytes() {
        var closing = fresh()
        closing.responseStarted(streaming: false, at: .seconds(1))
        let closed = closing.responseWritten(closeAfter: true, requestRead: true, at: .seconds(2))
        #expect(closed == .close)
        var lingering = fresh()
        lingering.headComplete()
        lingering.responseStarted(streaming: false, at: .seconds(1)) // refused before its body was read
        let linger = lingering.responseWritten(closeAfter: true, requestRead: false, at: .seconds(2))
        #expect(linger == .linger)
        #expect(lingering.phase == .lingering && !lingering.isBusy(headInProgress: false))
        #expect(lingering.timeoutAction(at: .seconds(3.9), outputPending: false) == .none)
        #expect(lingering.timeoutAction(at: .seconds(4.1), outputPending: false) == .close, "lingering lasts 2 s")
    }

    @Test func aHeadThatDoesNotArriveInTimeIsAnswered408AndAnIdleConnectionCloses() {
        var state = fresh()
        state.headBytesArrived(at: .seconds(1))
        state.headComplete()
        state.bodyComplete()
        state.responseStarted(streaming: false, at: .seconds(2))
        _ = state.responseWritten(closeAfter: false, requestRead: true, at: .seconds(3))
        #expect(state.timeoutAction(at: .seconds(62), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(64), outputPending: false) == .close, "kept alive, idle past 60 s")
        state.received(at: .seconds(50))
        state.headBytesArrived(at: .seconds(50))
        state.headBytesArrived(at: .seconds(55)) // more of the same head: the time counts from its first byte
        #expect(state.timeoutAction(at: .seconds(59.9), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(60.1), outputPending: false) == .requestTimeout)
        state.responseStarted(streaming: false, at: .seconds(60.1))
        #expect(state.headStarted == nil, "the 408 ends that head's clock")
    }

    /// A connection that has sent nothing yet has the head's time to send its first request, not a kept-alive
    /// connection's idle minute: silent connections (a slow-loris opener, a client that died after connecting) held
    /// a connection slot each for 60 s.
    @Test func aConnectionThatNeverSpeaksClosesAfterTheHeadsTime() {
        let silent = fresh()
        #expect(silent.timeoutAction(at: .seconds(9.9), outputPending: false) == .none)
        #expect(silent.timeoutAction(at: .seconds(10.1), outputPending: false) == .close, "no 408: no request began")
        var short = State(now: .seconds(0), timeouts: .init(header: .seconds(10), idle: .seconds(5), transfer: .seconds(30),
                                                            heartbeat: .seconds(15)))
        #expect(short.timeoutAction(at: .seconds(5.1), outputPending: false) == .close, "an idle limit below the head's holds")
        short.received(at: .seconds(1))
        short.headBytesArrived(at: .seconds(1))
        #expect(short.timeoutAction(at: .seconds(10.9), outputPending: false) == .none, "a head under way has its own time")
        // A request refused before its head was taken (a 404, a 401 before the retry with a token) keeps the
        // connection as any answered one does: the idle minute, not the head's time.
        var refused = fresh()
        refused.headBytesArrived(at: .seconds(1))
        refused.responseStarted(streaming: false, at: .seconds(1))
        _ = refused.responseWritten(closeAfter: false, requestRead: true, at: .seconds(2))
        #expect(refused.timeoutAction(at: .seconds(30), outputPending: false) == .none, "kept alive after a refusal")
        #expect(refused.timeoutAction(at: .seconds(63), outputPending: false) == .close)
    }

    @Test func aBodyStallsOnlyWhenTheClientDoes() {
        var state = fresh()
        state.headComplete()
        state.received(at: .seconds(5))
        #expect(state.timeoutAction(at: .seconds(34), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(36), outputPending: false) == .close)
        // The sink's disk writes are behind and reading is paused: not the client's stall.
        state.sinkBusy()
        #expect(state.timeoutAction(at: .seconds(100), outputPending: false) == .none)
        let resumed = state.sinkReady(at: .seconds(100))
        let again = state.sinkReady(at: .seconds(101))
        #expect(resumed && !again, "resumed once")
        #expect(state.timeoutAction(at: .seconds(129), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(131), outputPending: false) == .close)
    }

    /// A body holding what another request waits for (a tus upload's lock) has `contended` (3 s) between bytes,
    /// not the transfer timeout: a client that went quiet lets it go, one still sending keeps it.
    @Test func aWantedBodyStallsSooner() {
        var state = fresh()
        state.headComplete()
        state.received(at: .seconds(5))
        #expect(state.timeoutAction(at: .seconds(7), outputPending: false, bodyWanted: true) == .none)
        #expect(state.timeoutAction(at: .seconds(9), outputPending: false, bodyWanted: true) == .close)
        #expect(state.timeoutAction(at: .seconds(9), outputPending: false) == .none, "not wanted: the transfer timeout")
        state.received(at: .seconds(9))
        #expect(state.timeoutAction(at: .seconds(11), outputPending: false, bodyWanted: true) == .none, "still sending")
        state.sinkBusy()
        #expect(state.timeoutAction(at: .seconds(20), outputPending: false, bodyWanted: true) == .none, "the disk, not the client")
    }

    @Test func aResponseThatStopsLeavingCloses() {
        var state = fresh()
        state.headComplete()
        state.bodyComplete()
        #expect(state.timeoutAction(at: .seconds(1000), outputPending: false) == .none, "the handler may take its time")
        state.responseStarted(streaming: false, at: .seconds(1000))
        state.wrote(at: .seconds(1010))
        #expect(state.timeoutAction(at: .seconds(1039), outputPending: true) == .none)
        #expect(state.timeoutAction(at: .seconds(1041), outputPending: true) == .close)
        #expect(state.timeoutAction(at: .seconds(1041), outputPending: false) == .none, "nothing left to send")
    }

    @Test func anEventStreamGetsHeartbeatsUntilItsClientStopsReading() {
        var state = fresh()
        state.headComplete()
        state.bodyComplete()
        state.responseStarted(streaming: true, at: .seconds(0))
        #expect(state.phase == .streaming && state.isRespondingOrWaiting)
        #expect(state.timeoutAction(at: .seconds(14), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(16), outputPending: false) == .heartbeat)
        state.wrote(at: .seconds(16))
        #expect(state.timeoutAction(at: .seconds(30), outputPending: false) == .none)
        #expect(state.timeoutAction(at: .seconds(47), outputPending: true) == .close, "30 s with bytes the client does not read")
        #expect(state.timeoutAction(at: .seconds(47), outputPending: false) == .heartbeat, "nothing unread: only quiet")
        state.streamEnded()
        #expect(state.phase == .writing)
        let next = state.responseWritten(closeAfter: false, requestRead: true, at: .seconds(48))
        #expect(next == .readNext)
    }

    @Test func anEndOfFileAfterAWholeRequestStillGetsItsResponse() {
        var waiting = fresh()
        waiting.headComplete()
        waiting.bodyComplete()
        #expect(waiting.inputEnd() == .finishResponse, "the handler runs: its answer goes out")
        waiting.responseStarted(streaming: false, at: .seconds(1))
        #expect(waiting.responseWritten(closeAfter: false, requestRead: true, at: .seconds(2)) == .readNext,
                "requests that came before the end of file are read from the buffer")
        #expect(waiting.inputEnd() == .close, "the end of file read again, between requests, closes")
        var writing = fresh()
        writing.headComplete()
        writing.bodyComplete()
        writing.responseStarted(streaming: false, at: .seconds(1))
        #expect(writing.inputEnd() == .finishResponse && writing.phase == .writing, "a download under way is finished")
        #expect(writing.timeoutAction(at: .seconds(20), outputPending: true) == .none)
        #expect(writing.timeoutAction(at: .seconds(32), outputPending: true) == .close, "a client that stops reading is still timed out")
        let idle = fresh()
        #expect(idle.inputEnd() == .close)
        var reading = fresh()
        reading.headComplete()
        #expect(reading.inputEnd() == .close, "a body cut short")
        var streaming = fresh()
        streaming.headComplete()
        streaming.bodyComplete()
        streaming.responseStarted(streaming: true, at: .seconds(1))
        #expect(streaming.inputEnd() == .close, "an event stream's reader left")
    }

    @Test func aClosedConnectionTakesNoResponseAndTimesNothingOut() {
        var state = fresh()
        state.close()
        #expect(state.isClosed && !state.canStartResponse && !state.readsRequests)
        #expect(state.timeoutAction(at: .seconds(10_000), outputPending: true) == .none)
    }
}
