import Dispatch

/// Frees what a commit leaves behind (its write group's tables, the requests it decided) on a
/// thread of its own instead of the writer's. The writer is what bounds a pipelined submit, and
/// freeing a 2,000-line commit's tens of thousands of objects took about 6% of its CPU time
/// (docs/benchmarks.md, "Session 33").
///
/// At most ``inFlight`` values wait to be freed: past that, ``release(_:)`` waits for the oldest,
/// so the memory held back stays bounded whatever the input's size.
final class Disposal: Sendable {
    /// The one every writer of the process uses.
    static let shared = Disposal(inFlight: 4)

    /// Values handed over and not yet freed, at most.
    let inFlight: Int
    private let thread = WorkerThread()
    private let slots: DispatchSemaphore

    init(inFlight: Int) {
        self.inFlight = max(1, inFlight)
        slots = DispatchSemaphore(value: self.inFlight)
    }

    deinit { thread.stop() }

    /// Frees `value` on the disposal thread. The caller gives up `value`: when it still shares what
    /// `value` owns, that is freed by whichever thread lets go of it last.
    func release<T>(_ value: consuming T) {
        let box = Box(value)
        slots.wait()
        thread.async { [slots] in
            box.value = nil  // freed here, even if the caller's thread has not yet dropped `box`
            slots.signal()
        }
    }

    /// Carries a value to the disposal thread. Unchecked: the caller gives it up (``release(_:)``),
    /// so only the disposal thread touches it afterwards.
    private final class Box<T>: @unchecked Sendable {
        var value: T?
        init(_ value: consuming T) { self.value = value }
    }
}
