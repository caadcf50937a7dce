/// The one rule for each App Store identifier the ledger keys on, applied wherever one enters:
/// decoded and signed payloads, legacy receipts, submissions, queries and support commands.
///
/// - Transaction ids (`originalTransactionId`, `transactionId`) are the decimal form of an unsigned
///   64-bit integer: StoreKit declares `Transaction.id` and `Transaction.originalID` as `UInt64`
///   (developer.apple.com/documentation/storekit/transaction/id), and the App Store Server API and
///   notifications carry the same number as a string. So: 1 to 20 ASCII digits, no sign, no leading
///   zero (but `0`, which Xcode's StoreKit testing uses), at most 18446744073709551615.
/// - Product ids are what App Store Connect accepts: "letters, numbers, hyphens, periods, and
///   underscores, and can be as long as 100 characters" (App Store Connect Help, In-App Purchase
///   information). So: 1 to 100 of `A-Z a-z 0-9 - . _`.
public enum AppleIdentifier: String, Sendable, CaseIterable {
    case originalTransactionId, transactionId, productId

    /// The rule, in words.
    public var rule: String {
        switch self {
        case .originalTransactionId, .transactionId:
            "an App Store transaction id is 1 to 20 decimal digits without a leading zero (a 64-bit unsigned integer)"
        case .productId:
            "a product id is 1 to 100 characters: ASCII letters, digits, hyphens, periods and underscores"
        }
    }

    /// True when `value` follows the rule.
    public func accepts(_ value: String) -> Bool {
        // Every line names three identifiers: read a native string's bytes in place.
        value.utf8.withContiguousStorageIfAvailable { accepts($0) } ?? accepts(Array(value.utf8))
    }

    private func accepts(_ bytes: some Collection<UInt8>) -> Bool {
        switch self {
        case .originalTransactionId, .transactionId:
            guard (1...20).contains(bytes.count), bytes.count == 1 || bytes.first != 0x30 else { return false }
            // Digits only, and at most UInt64.max: one pass.
            var number: UInt64 = 0
            for byte in bytes {
                guard (0x30...0x39).contains(byte) else { return false }
                let (tens, overflow) = number.multipliedReportingOverflow(by: 10)
                let (sum, carry) = tens.addingReportingOverflow(UInt64(byte - 0x30))
                guard !overflow, !carry else { return false }
                number = sum
            }
            return true
        case .productId:
            return (1...100).contains(bytes.count)
                && bytes.allSatisfy { byte in
                    switch byte {
                    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F: true
                    default: false
                    }
                }
        }
    }

    /// Why `value`, given as `field`, is refused: nil when it follows the rule. Long values are cut
    /// in the message. `field` is built only for a refusal (the accepted case is every line's).
    public func problem(_ value: String, field: @autoclosure () -> String) -> String? {
        guard !accepts(value) else { return nil }
        let shown = value.count <= 40 ? value : value.prefix(40) + "… (\(value.utf8.count) bytes)"
        return "\(field()) \"\(shown)\" is refused: \(rule)"
    }
}
