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

    /// <summary>
    /// A witness: a voter that holds no log (<see cref="FailoverMode.Raft"/> only). It votes in the Raft elections and
    /// takes promotions' terms, so that a primary with one replica has the third voter a majority needs; it serves
    /// nothing and is never promoted.
    /// </summary>
    Witness,
}

/// <summary>Who decides that a replica takes over (<see cref="ReplicationOptions.Failover"/>).</summary>
public enum FailoverMode
{
    /// <summary>An operator or a script: <c>psctl replication promote</c> (the default).</summary>
    Manual,

    /// <summary>
    /// Automatic: the group's nodes (and witnesses) run Raft (DotNext's, over HTTP on the service's port); the elected
    /// leader watches the primary and promotes the replica with the longest log when the primary stops answering.
    /// </summary>
    Raft,
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

    /// <summary>
    /// How often an idle primary tells its replicas it is there (and learns of a newer term): 1 second by default. With
    /// <see cref="FailoverMode.Raft"/> at most a third of <see cref="ElectionTimeout"/> (<see cref="EffectiveHeartbeatInterval"/>):
    /// the replicas' silence is how the coordinator finds a hung primary.
    /// </summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// The interval an idle primary's shippers keep: <see cref="HeartbeatInterval"/>, and with <see cref="FailoverMode.Raft"/>
    /// no more than a third of <see cref="ElectionTimeout"/>, so that a replica that heard nothing for an election timeout
    /// missed at least two heartbeats (issue 51: a hung primary found within the election timeout).
    /// </summary>
    internal TimeSpan EffectiveHeartbeatInterval
        => Failover == FailoverMode.Raft && ElectionTimeout / 3 < HeartbeatInterval ? ElectionTimeout / 3 : HeartbeatInterval;

    /// <summary>
    /// Who promotes a replica when the primary is lost: <see cref="FailoverMode.Manual"/> (the default; an operator, with
    /// <c>psctl replication promote</c>) or <see cref="FailoverMode.Raft"/> (automatic, docs/replication.md "Failover").
    /// </summary>
    public FailoverMode Failover { get; set; } = FailoverMode.Manual;

    /// <summary>
    /// This node's own base address, as the other nodes reach it (required with <see cref="FailoverMode.Raft"/>: it is
    /// this node's Raft member address). When set, an entry of <see cref="Replicas"/> equal to it is this node and is
    /// skipped, so every node of a group may be given the same list (a Kubernetes StatefulSet's pods).
    /// </summary>
    public Uri? Address { get; set; }

    /// <summary>
    /// With <see cref="FailoverMode.Raft"/> and no log of its own to start from: the base address of the node that starts
    /// as the primary (the others start as replicas). Lets every node of a new group share one configuration; ignored
    /// once a node's directory records a term, and when <see cref="Role"/> is set.
    /// </summary>
    public Uri? InitialPrimary { get; set; }

    /// <summary>
    /// The base addresses of the group's witnesses (<see cref="ReplicationRole.Witness"/>, <see cref="FailoverMode.Raft"/>
    /// only): voters without a log. A group of two log nodes needs one for a majority of three.
    /// </summary>
    public IList<Uri> Witnesses { get; } = new List<Uri>();

    /// <summary>
    /// The Raft election timeout's upper bound (300 ms by default; the lower bound is half of it): how long the group goes
    /// without hearing from its leader before it elects another. Also how often the leader asks the primary whether it is
    /// there (a sixth of it), and the failover's detection time: a primary whose replicas heard nothing from it for an
    /// election timeout, and that does not answer within one itself, is given up (docs/replication.md, "Failover").
    /// </summary>
    public TimeSpan ElectionTimeout { get; set; } = TimeSpan.FromMilliseconds(300);

    /// <summary>
    /// How long a switchover (<c>POST /ps/replication/switchover</c>, <c>psctl replication switchover</c>, or the SIGTERM of
    /// a primary with <see cref="FailoverMode.Raft"/>) waits for the requests running on the primary to finish and for the
    /// chosen replica to hold all of its log (5 seconds by default). New requests are refused meanwhile (503 <c>replica</c>:
    /// gateways and clients try the group's other nodes); when it passes, the switchover is refused and the primary serves again.
    /// </summary>
    public TimeSpan SwitchoverTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Whether a switchover checkpoints every session and shared variable before it hands over, as a drain does (true by
    /// default), within <see cref="SwitchoverTimeout"/>. The new primary then replays nothing the old one ran, so a replica
    /// of a new build whose replies differ takes over without its sessions diverging (docs/upgrades.md). False saves the
    /// checkpoint's time (a record for each session that ran a request since its last checkpoint) where every node runs
    /// the same build: the new primary's hot follower has replayed those requests already.
    /// </summary>
    public bool CheckpointBeforeSwitchover { get; set; } = true;

    /// <summary>
    /// How far behind a node may fall before its health says so (5 seconds by default; positive). On a primary, readiness is
    /// degraded while fewer than <see cref="RequiredReplicas"/> replicas hold what became durable on its disk more than this
    /// long ago (acknowledgements then wait about that long). On a replica, its status is degraded while its hot follower has
    /// been behind its copy for longer (a promotion now would replay that backlog first); its liveness stays healthy: a
    /// lagging replica is never restarted for it (docs/replication.md, "Health").
    /// </summary>
    public TimeSpan MaxHealthyLag { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Whether <c>GET /ps/replication/status</c> answers requests that are not signed with the peer key. False (the
    /// default, issue 51): only this service's own nodes and operators (psctl signs it) see a node's role, term and the
    /// group's addresses; anyone else gets 401. True: anyone who reaches the node's port (a script's <c>curl</c>, a monitor
    /// on a private network); the gateway still never forwards it from outside unless told to (docs/gateway.md).
    /// </summary>
    public bool AnonymousStatus { get; set; }

    internal int EffectiveRequiredReplicas => RequiredReplicas ?? (Peers.Count + 1) / 2;

    /// <summary>The other log-holding nodes of the group: <see cref="Replicas"/> without <see cref="Address"/> (and, on a witness, all of them).</summary>
    internal IReadOnlyList<Uri> Peers => [.. Replicas.Where(r => r is not null && (Address is null || !SameNode(r, Address))).Distinct()];

    /// <summary>Every node of the group that holds a log, this one included unless it is a witness (what the failover coordinator watches).</summary>
    internal IReadOnlyList<Uri> LogNodes => Role == ReplicationRole.Witness || Address is null ? Peers : [Address, .. Peers];

    /// <summary>Whether two base addresses name the same node (scheme, host, port and path, case-insensitive host).</summary>
    internal static bool SameNode(Uri a, Uri b)
        => Uri.Compare(a, b, UriComponents.SchemeAndServer | UriComponents.Path, UriFormat.Unescaped, StringComparison.OrdinalIgnoreCase) == 0 ||
           (a.IsAbsoluteUri && b.IsAbsoluteUri && string.Equals(a.GetLeftPart(UriPartial.Authority), b.GetLeftPart(UriPartial.Authority), StringComparison.OrdinalIgnoreCase) &&
            a.AbsolutePath.TrimEnd('/') == b.AbsolutePath.TrimEnd('/'));

    /// <summary>
    /// The role a node without a term file starts in: <see cref="Role"/>, or, with <see cref="InitialPrimary"/> and no
    /// role set, primary when that is this node's <see cref="Address"/>, else replica.
    /// </summary>
    internal ReplicationRole ConfiguredRole
        => Role != ReplicationRole.None || InitialPrimary is null || Address is null
            ? Role
            : SameNode(InitialPrimary, Address) ? ReplicationRole.Primary : ReplicationRole.Replica;

    internal IEnumerable<string> Validate(PersistentServicesOptions service)
    {
        if (ConfiguredRole == ReplicationRole.None)
        {
            if (InitialPrimary is not null && Address is null)
            {
                yield return "PersistentServicesOptions.Replication.InitialPrimary needs Address (this node's own base address), to tell whether this node is the one.";
            }

            yield break;
        }

        if (!Enum.IsDefined(Role))
        {
            yield return $"PersistentServicesOptions.Replication.Role must be None, Primary, Replica or Witness (was {(int)Role}).";
        }

        foreach (var error in ValidateFailover())
        {
            yield return error;
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

        if (ConfiguredRole == ReplicationRole.Primary && Peers.Count == 0)
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

        if (RequiredReplicas is { } required && (required < 0 || required > Peers.Count))
        {
            yield return $"PersistentServicesOptions.Replication.RequiredReplicas must be between 0 and the number of Replicas ({Peers.Count}; this node's own Address is not counted), or null for a majority (was {required}).";
        }

        if (MaxShipmentBytes < 64 << 10)
        {
            yield return $"PersistentServicesOptions.Replication.MaxShipmentBytes must be at least 65536 (was {MaxShipmentBytes}).";
        }

        if (RetryInterval <= TimeSpan.Zero || HeartbeatInterval <= TimeSpan.Zero)
        {
            yield return "PersistentServicesOptions.Replication.RetryInterval and HeartbeatInterval must be positive.";
        }

        if (SwitchoverTimeout <= TimeSpan.Zero || SwitchoverTimeout > TimeSpan.FromMinutes(1))
        {
            yield return $"PersistentServicesOptions.Replication.SwitchoverTimeout must be positive and at most 1 minute (was {SwitchoverTimeout}).";
        }

        if (MaxHealthyLag <= TimeSpan.Zero)
        {
            yield return $"PersistentServicesOptions.Replication.MaxHealthyLag must be positive (was {MaxHealthyLag}).";
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

    private IEnumerable<string> ValidateFailover()
    {
        if (!Enum.IsDefined(Failover))
        {
            yield return $"PersistentServicesOptions.Replication.Failover must be Manual or Raft (was {(int)Failover}).";
            yield break;
        }

        foreach (var uri in Witnesses.Append(Address).Append(InitialPrimary))
        {
            if (uri is not null && (!uri.IsAbsoluteUri || uri.Scheme is not ("http" or "https")))
            {
                yield return $"PersistentServicesOptions.Replication: '{uri}' (Address, InitialPrimary or Witnesses) is not an absolute http or https address.";
            }
        }

        if (Witnesses.Any(w => w is null))
        {
            yield return "PersistentServicesOptions.Replication.Witnesses has an empty entry (a configuration key without a value): give each witness's base address.";
            yield break;
        }

        if (Failover == FailoverMode.Manual)
        {
            if (Role == ReplicationRole.Witness || Witnesses.Count > 0)
            {
                yield return "PersistentServicesOptions.Replication: witnesses vote in Raft elections; they need Failover = Raft.";
            }

            yield break;
        }

        if (Address is null)
        {
            yield return "PersistentServicesOptions.Replication.Address (this node's own base address, as the other nodes reach it) is required with Failover = Raft.";
            yield break;
        }

        var logNodes = (Role == ReplicationRole.Witness ? 0 : 1) + Peers.Count;
        var voters = logNodes + Witnesses.Count(w => !SameNode(w, Address)) + (Role == ReplicationRole.Witness ? 1 : 0);
        if (Role == ReplicationRole.Witness && Peers.Count < 2)
        {
            yield return "PersistentServicesOptions.Replication.Replicas of a witness must name the group's log nodes (at least two).";
        }

        if (voters < 3)
        {
            yield return $"PersistentServicesOptions.Replication: Raft needs at least three voters for a majority that survives one loss, and this group has {voters} " +
                         "(a primary with one replica needs a witness: Replication.Witnesses, docs/replication.md).";
        }

        // Every acknowledged record is on RequiredReplicas + 1 log nodes; a promotion's term is taken by a majority of the
        // voters, of which at least (majority - witnesses) hold a log. The two sets must meet, or the promoted node could
        // lack an acknowledged record.
        var required = RequiredReplicas ?? (Peers.Count + (Role == ReplicationRole.Witness ? 0 : 1)) / 2;
        var witnesses = voters - logNodes;
        var majority = (voters / 2) + 1;
        if (required > 0 && required + 1 + (majority - witnesses) <= logNodes)
        {
            yield return $"PersistentServicesOptions.Replication: with {logNodes} log nodes, {witnesses} witnesses and RequiredReplicas {required}, a promotion's majority " +
                         "need not include a node holding every acknowledged record: require more replicas, or use fewer witnesses.";
        }

        if (ElectionTimeout < TimeSpan.FromMilliseconds(50) || ElectionTimeout > TimeSpan.FromMinutes(1))
        {
            yield return $"PersistentServicesOptions.Replication.ElectionTimeout must be between 50 ms and 1 minute (was {ElectionTimeout}).";
        }
    }
}
