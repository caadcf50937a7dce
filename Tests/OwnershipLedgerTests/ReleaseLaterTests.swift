import Foundation
import Testing

@testable import OwnershipLedger

/// The group committer's writer leaves what it is done with to ``ReleaseLater``; whoever calls
/// ``ReleaseLater/releaseAll()`` (the next producer, or `close()`) releases it.
@Suite struct ReleaseLaterTests {
    /// Set when its ``Tracked`` is released.
    final class Released: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.withLock { value = true } }
        var isSet: Bool { lock.withLock { value } }
    }

    final class Tracked: Sendable {
        let released: Released
        init(_ released: Released) { self.released = released }
        deinit { released.set() }
    }

    @Test func keptValuesLiveUntilReleaseAll() {
        let later = ReleaseLater()
        let first = Released()
        let second = Released()
        later.keep(Tracked(first))
        later.keep(([Tracked(second)], 7))  // any value: the writer keeps tuples of arrays
        #expect(!first.isSet && !second.isSet)
        later.releaseAll()
        #expect(first.isSet && second.isSet)
        later.releaseAll()  // nothing left: a no-op
    }
}
