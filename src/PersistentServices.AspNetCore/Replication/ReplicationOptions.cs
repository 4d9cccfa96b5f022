namespace PersistentServices;

/// <summary>Which part a service's process plays in log shipping (<see cref="ReplicationOptions.Role"/>).</summary>
public enum ReplicationRole
{
    /// <summary>No replication: one log, on this process's disk (the default).</summary>
    None,

    /// <summary>The primary: it serves, and ships its committed log to <see cref="ReplicationOptions.Replicas"/>.</summary>
    Primary,

    /// <summary>A replica: it keeps a copy of the primary's log, serves nothing (503) and takes over when promoted.</summary>
    Replica,
}

/// <summary>
/// Log shipping to replicas (docs/replication.md; [Zero-loss VM]: a standby that takes over with no lost request;
/// [Replicated FS]: replicas that leave and rejoin). Part of <see cref="PersistentServicesOptions"/>. The primary ships
/// its committed log, byte for byte, to each replica, which keeps it in its own log directory; in synchronous mode (the
/// default) a request is acknowledged only once <see cref="RequiredReplicas"/> replicas hold its records durably, so the
/// replica with the longest log, promoted after the primary's loss (its node, its disk) has every acknowledged request. Replication messages
/// are signed with <see cref="PersistentCallOptions.PeerKey"/>.
/// </summary>
public sealed class ReplicationOptions
{
    /// <summary>
    /// The role this process starts in when its log directory has none yet. Once a directory has taken part in
    /// replication, the role it records for the newest term wins (a promotion, or a fence by a newer primary, outlives
    /// the process): a fenced primary restarts as a replica, a promoted replica as the primary.
    /// </summary>
    public ReplicationRole Role { get; set; } = ReplicationRole.None;

    /// <summary>
    /// The replication term a primary starts in (1 by default). Every shipment carries it; a replica refuses an older one,
    /// so a primary of an older term is fenced: it acknowledges nothing more. A promotion names the next term.
    /// </summary>
    public long Term { get; set; } = 1;

    /// <summary>
    /// The base addresses of the other nodes of this service's replication group: where a primary ships its log (and,
    /// on a replica, where it will ship once promoted). Each must be a persistent service of the same
    /// <see cref="PersistentServicesOptions.ServiceName"/> with its own log directory.
    /// </summary>
    public IList<Uri> Replicas { get; } = new List<Uri>();

    /// <summary>
    /// How many replicas must hold a record durably before it counts as durable (a reply that depends on it is
    /// acknowledged). Null (the default): a majority of the group with the primary, that is half of
    /// <see cref="Replicas"/> rounded up (1 of 1, 1 of 2, 2 of 3, 2 of 4): every acknowledged record is then on a
    /// majority of the nodes, and the replica with the longest log holds all of them (each replica holds a prefix of the
    /// primary's log). A group of two stops acknowledging while either node is away; three keep serving through the loss
    /// of one. 0: asynchronous replication, acknowledged once on the primary's disk; what the replicas did not yet receive
    /// is lost with the primary's disk (the loss window, docs/replication.md).
    /// </summary>
    public int? RequiredReplicas { get; set; }

    /// <summary>The most log bytes in one shipment (1 MiB by default; at least 64 KiB): a catching-up replica gets the log in pieces of about this size.</summary>
    public int MaxShipmentBytes { get; set; } = 1 << 20;

    /// <summary>How long a primary waits before it asks an unreachable replica again (200 ms by default).</summary>
    public TimeSpan RetryInterval { get; set; } = TimeSpan.FromMilliseconds(200);

    /// <summary>How often an idle primary tells its replicas it is there (and learns of a newer term): 1 second by default.</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(1);

    internal int EffectiveRequiredReplicas => RequiredReplicas ?? (Replicas.Count + 1) / 2;

    internal IEnumerable<string> Validate(PersistentServicesOptions service)
    {
        if (Role == ReplicationRole.None)
        {
            yield break;
        }

        if (!Enum.IsDefined(Role))
        {
            yield return $"PersistentServicesOptions.Replication.Role must be None, Primary or Replica (was {(int)Role}).";
        }

        if (Term is < 1 or > 0x00FF_FFFF_FFFF_FFFFL)
        {
            yield return $"PersistentServicesOptions.Replication.Term must be between 1 and 2^56 - 1 (was {Term}).";
        }

        if (Replicas.Any(r => r is null))
        {
            yield return "PersistentServicesOptions.Replication.Replicas has an empty entry (a configuration key without a value): give each node's base address.";
            yield break;
        }

        if (Role == ReplicationRole.Primary && Replicas.Count == 0)
        {
            yield return "PersistentServicesOptions.Replication.Replicas must name at least one replica of a primary (or set Role to None).";
        }

        foreach (var replica in Replicas)
        {
            if (!replica.IsAbsoluteUri || replica.Scheme is not ("http" or "https"))
            {
                yield return $"PersistentServicesOptions.Replication.Replicas: '{replica}' is not an absolute http or https address.";
            }
        }

        if (RequiredReplicas is { } required && (required < 0 || required > Replicas.Count))
        {
            yield return $"PersistentServicesOptions.Replication.RequiredReplicas must be between 0 and the number of Replicas ({Replicas.Count}), or null for all of them (was {required}).";
        }

        if (MaxShipmentBytes < 64 << 10)
        {
            yield return $"PersistentServicesOptions.Replication.MaxShipmentBytes must be at least 65536 (was {MaxShipmentBytes}).";
        }

        if (RetryInterval <= TimeSpan.Zero || HeartbeatInterval <= TimeSpan.Zero)
        {
            yield return "PersistentServicesOptions.Replication.RetryInterval and HeartbeatInterval must be positive.";
        }

        if (string.IsNullOrEmpty(service.Calls.PeerKey))
        {
            yield return "PersistentServicesOptions.Calls.PeerKey is required with replication: shipments and promotions are signed with it (docs/replication.md).";
        }

        if (service.Domain.Members.Count > 0)
        {
            yield return "PersistentServicesOptions.Replication cannot be combined with a service domain yet (docs/replication.md, \"Not yet\").";
        }
    }
}
