import Foundation
public import LedgerCore

/// JSON renderings of records for `ledger log`, replays and exports. Accounts appear as pseudonyms
/// and lineages as keyed hashes, exactly as stored.
public enum RecordJSON {
    /// A format-2 record: `seq`, `recordedAt` (the ledger's clock), `at` (the business time of the
    /// attempt), `command` (its idempotency key), `attempt`, and `events`, each an object with
    /// `event` (its name) and its fields.
    public static func render(_ record: Record) -> JSONObject {
        [
            "seq": record.sequence, "recordedAt": LedgerTime.format(record.recordedAt), "at": LedgerTime.format(record.at),
            "command": record.command.hex, "attempt": Int(record.attempt),
            "events": record.events.map { event -> JSONObject in
                var object = fields(of: event)
                object["event"] = event.name
                return object
            },
        ]
    }

    /// A format-1 record exactly as format 1 rendered it (dispute bundles handed out before an
    /// upgrade carry these): 32-byte keys, the notification key, event id, previous hash and hash.
    public static func render(_ record: FormatOne.Record) -> JSONObject {
        var object = fields(of: record.event, wide: record.wide)
        object["event"] = record.event.name
        object["seq"] = record.sequence
        object["recordedAt"] = LedgerTime.format(record.recordedAt)
        object["eventId"] = record.eventId.hex
        object["schemaVersion"] = Int(record.schemaVersion)
        object["previousHash"] = record.previousHash.hex
        object["hash"] = record.hash.hex
        return object
    }

    /// The event's own fields (with `wide`, as format 1 stored its identifiers and rendered them: the
    /// fields format 2 added are left out, so a format-1 bundle's records render as they were exported).
    public static func fields(of event: LedgerEvent, wide: FormatOne.WideKeys? = nil) -> JSONObject {
        var object = formatOneFields(of: event, wide: wide)
        guard wide == nil else { return object }
        func signatures(_ signedAfter: UInt64?, _ coSignedBy: StaffID?, _ coSignature: [UInt8]) {
            object["signedAfter"] = signedAfter.map { $0 as Any } ?? NSNull()
            object["coSignedBy"] = coSignedBy ?? NSNull()
            object["coSignature"] = coSignature.hex
        }
        switch event {
        case .staffEnrolled(let e): signatures(e.signedAfter, e.coSignedBy, e.coSignature)
        case .staffRemoved(let e): signatures(e.signedAfter, e.coSignedBy, e.coSignature)
        case .rosterChangeProposed(let change):
            var proposed = fields(of: change.event)
            proposed["event"] = change.event.name
            object["change"] = proposed
        case .transferApplied(let e): object["signature"] = e.signature.hex
        case .transferRefused(let e): object["lineage"] = e.lineage?.description ?? NSNull()
        case .storeUpgraded(let e): object["copiedRecords"] = e.copiedRecords
        default: break
        }
        return object
    }

    /// The fields format 1 rendered.
    private static func formatOneFields(of event: LedgerEvent, wide: FormatOne.WideKeys?) -> JSONObject {
        func lineage(_ key: LineageKey) -> String { key.description + (wide?.lineageSuffix?.hex ?? "") }
        func transaction(_ t: TransactionFacts) -> JSONObject {
            var object: JSONObject = [
                "transactionKey": t.transactionKey.hex + (wide?.transactionKeySuffix?.hex ?? ""), "productId": t.productId,
                "purchaseDate": LedgerTime.format(t.purchaseDate), "expiresDate": t.expiresDate.map(LedgerTime.format) ?? NSNull(),
                "revocationDate": t.revocationDate.map(LedgerTime.format) ?? NSNull(), "inAppOwnershipType": t.ownership.appleValue,
                "environment": t.environment, "signedDate": LedgerTime.format(t.signedDate),
                "provenance": t.provenance == .verifiedJWS
                    ? "verified-jws" : t.provenance == .trustedDecoded ? "trusted-decoded" : "legacy-receipt",
            ]
            if t.isUpgraded { object["isUpgraded"] = true }
            return object
        }
        switch event {
        case .transactionSubmitted(let e):
            var object: JSONObject = ["kind": e.kind.name, "lineage": lineage(e.lineage), "transaction": transaction(e.transaction)]
            if let account = e.account { object["account"] = account.description }
            return object
        case .notificationReceived(let e):
            var object: JSONObject = ["notificationType": e.notificationType, "signedDate": LedgerTime.format(e.signedDate)]
            if let key = wide?.notificationKey { object["notificationKey"] = key.hex }
            if let subtype = e.subtype { object["subtype"] = subtype }
            if let notified = e.lineage { object["lineage"] = lineage(notified) }
            if let t = e.transaction { object["transaction"] = transaction(t) }
            return object
        case .accountDeletionRequested(let account), .accountDeleted(let account):
            return ["account": account.description]
        case .lineageBound(let key, let account), .entitlementReinstated(let key, let account):
            return ["lineage": lineage(key), "account": account.description]
        case .lineageTombstoned(let key, let account):
            return ["lineage": lineage(key), "formerAccount": account.description]
        case .entitlementGranted(let e):
            var object: JSONObject = [
                "lineage": lineage(e.lineage), "account": e.account.description, "productId": e.productId,
                "expiresAt": e.expiresAt.map(LedgerTime.format) ?? NSNull(),
            ]
            if let purchasedAt = e.purchasedAt { object["purchasedAt"] = LedgerTime.format(purchasedAt) }
            return object
        case .entitlementEnded(let key, let account, let reason):
            return ["lineage": lineage(key), "account": account.description, "reason": reason.name]
        case .entitlementRevoked(let key, let account, let revokedAt):
            return ["lineage": lineage(key), "account": account.description, "revokedAt": LedgerTime.format(revokedAt)]
        case .staffEnrolled(let e):
            return [
                "staff": e.staff, "roles": e.roles.names, "publicKey": e.publicKey.hex, "enrolledBy": e.enrolledBy ?? NSNull(),
                "ownAccount": e.ownAccount?.description ?? NSNull(), "signature": e.signature.hex,
            ]
        case .staffRemoved(let e):
            return ["staff": e.staff, "removedBy": e.removedBy, "signature": e.signature.hex]
        case .rosterChangeProposed:
            return [:]
        case .transferRequested(let e):
            return [
                "caseId": e.plan.caseId, "lineage": lineage(e.plan.lineage), "source": source(e.plan.source),
                "target": e.plan.target.description, "lineageVersion": e.plan.lineageVersion,
                "targetAuthentication": e.plan.targetAuthentication, "ownershipEvidence": e.plan.ownershipEvidence,
                "reason": e.plan.reason, "planDigest": e.planDigest.hex, "requestedBy": e.requestedBy,
                "signature": e.signature.hex,
            ]
        case .transferApproved(let e):
            return ["caseId": e.caseId, "planDigest": e.planDigest.hex, "approvedBy": e.approvedBy, "signature": e.signature.hex]
        case .transferApplied(let e):
            return [
                "caseId": e.caseId, "planDigest": e.planDigest.hex, "lineage": lineage(e.lineage), "source": source(e.source),
                "target": e.target.description, "appliedBy": e.appliedBy,
            ]
        case .transferRefused(let e):
            return ["caseId": e.caseId, "step": e.step, "staff": e.staff, "reason": e.reason]
        case .decisionIssued(let e):
            var object: JSONObject = [
                "decision": e.reason.outcome.rawValue, "code": e.reason.code, "message": e.reason.message,
            ]
            if let decided = e.lineage { object["lineage"] = lineage(decided) }
            if let account = e.account { object["account"] = account.description }
            return object
        case .storeUpgraded(let e):
            return [
                "fromFormat": Int(e.fromFormat), "records": e.records, "headHash": e.headHash.hex, "merkleRoot": e.merkleRoot.hex,
            ]
        }
    }

    static func source(_ source: PlanSource) -> JSONObject {
        switch source {
        case .bound(let account): ["state": "bound", "account": account.description]
        case .tombstoned(let account): ["state": "tombstoned", "formerAccount": account.description]
        }
    }
}
