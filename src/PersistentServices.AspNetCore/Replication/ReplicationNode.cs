using System.Diagnostics;
using System.Net.Http.Json;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Replication;

namespace PersistentServices.Replication;

/// <summary>
/// This process's part in log shipping (docs/replication.md): which role it plays in which term, the replica's copy of
/// the log while it is a replica (<see cref="ReplicaLog"/>), the promotion that makes it the primary (recovery then opens
/// that copy as its log, <see cref="Recovery.LogOpener"/>), and, on a primary, the watermark its log's durable waits
/// wait for and a <see cref="LogShipper"/> per replica. A singleton; inactive when <see cref="ReplicationOptions.Role"/>
/// is <see cref="ReplicationRole.None"/>.
/// </summary>
internal sealed partial class ReplicationNode : IAsyncDisposable
{
    /// <summary>The named client shipments go out on.</summary>
    public const string HttpClientName = "PersistentServices.Replication";

    private readonly PersistentServicesOptions _service;
    private readonly ReplicationOptions _options;
    private readonly PersistentRuntime _runtime;
    private readonly ServiceAvailability _availability;
    private readonly IHttpClientFactory _httpClients;
    private readonly ILogger<ReplicationNode> _logger;
    private TaskCompletionSource _promoted = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private TaskCompletionSource _fencedSignal = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly CancellationTokenSource _stopping = new();
    private CancellationTokenSource? _shipStop;
    private int _replicationObserved;
    private readonly Lock _gate = new();
    private readonly List<Task> _shippers = [];
    private ReplicaLog? _replica;
    private ReplicationWatermark? _watermark;
    private LogShipper[] _shipping = [];
    private int _resolved;
    private bool _promoting;

    /// <summary>How long a promotion waits for the other nodes to take its term.</summary>
    private static readonly TimeSpan ClaimTimeout = TimeSpan.FromSeconds(5);
    private int _disposed;

    public ReplicationNode(IOptions<PersistentServicesOptions> options, PersistentRuntime runtime, ServiceAvailability availability, IHttpClientFactory httpClients,
        ILogger<ReplicationNode> logger)
    {
        _service = options.Value;
        _options = _service.Replication;
        _runtime = runtime;
        _availability = availability;
        _httpClients = httpClients;
        _logger = logger;
        Replays = new ControlReplayGuard(runtime.Time, _service.Calls.SignatureWindow + _service.Calls.SignatureFutureSkew);
    }

    /// <summary>The control messages (promotions, switchovers) this node took, each accepted once.</summary>
    public ControlReplayGuard Replays { get; }

    /// <summary>
    /// Whether a control message naming <paramref name="node"/> is for this node: its <see cref="ReplicationOptions.Address"/>
    /// when configured (required with Raft); without one, any address that is not one of the group's other nodes
    /// (<see cref="ReplicationOptions.Replicas"/>, <see cref="ReplicationOptions.Witnesses"/>), so a message made for
    /// another node of the group is refused here.
    /// </summary>
    public bool IsThisNode(Uri node)
        => _options.Address is { } self
            ? ReplicationOptions.SameNode(node, self)
            : !_options.Peers.Concat(_options.Witnesses).Any(other => ReplicationOptions.SameNode(other, node));

    /// <summary>Whether replication is configured at all.</summary>
    public bool Enabled => _options.ConfiguredRole != ReplicationRole.None;

    /// <summary>The role this process plays now.</summary>
    public ReplicationRole Role { get; private set; }

    /// <summary>The term this process plays it in (a replica: the newest it has seen).</summary>
    public long Term
    {
        get => Volatile.Read(ref _replica) is { } replica ? replica.Term : _term;
        private set => _term = value;
    }

    private long _term;

    /// <summary>Whether this process started as a replica (or is a witness) and is not yet promoted: recovery waits for <see cref="PromotedAsync"/>.</summary>
    public bool WaitsForPromotion => Role is ReplicationRole.Replica or ReplicationRole.Witness;

    /// <summary>The group's options (what the failover coordinator watches).</summary>
    public ReplicationOptions Options => _options;

    /// <summary>The replica's copy of the log, while this process is a replica.</summary>
    public ReplicaLog? Replica => Volatile.Read(ref _replica);

    /// <summary>This replica's hot follower, once it started (for status).</summary>
    public HotFollower? Follower { get; set; }

    /// <summary>
    /// A shipment or heartbeat of the primary of this replica's term reached it: the primary is there. What the replica's
    /// status reports as <see cref="ReplicaStatus.HeardMs"/>, and how the failover coordinator tells a hung primary (one
    /// that accepts connections and answers nothing) within an election timeout (docs/replication.md, "Failover").
    /// </summary>
    public void Heard() => Volatile.Write(ref _heardAt, _runtime.Time.GetTimestamp());

    /// <summary>How long ago this replica last heard from its term's primary (<see cref="Heard"/>); null: not since its copy opened.</summary>
    public TimeSpan? SinceHeard => Volatile.Read(ref _heardAt) is var at and not 0 ? _runtime.Time.GetElapsedTime(at) : null;

    private long _heardAt;

    /// <summary>The primary's watermark, once its log is open.</summary>
    public ReplicationWatermark? Watermark => _watermark;

    /// <summary>The shippers of a primary (one per replica), for status.</summary>
    public IReadOnlyList<LogShipper> Shippers => _shipping;

    /// <summary>The service's name (what shipments are signed for).</summary>
    public string ServiceName => _service.ServiceName;

    /// <summary>Signs and verifies replication messages.</summary>
    public Calls.PeerAuthentication Peers => _runtime.Peers;

    /// <summary>
    /// Decides, once and synchronously (before recovery's first half starts), which role this process starts in: the role
    /// its log directory records for the newest term when that is at least the configured term, else the configured one.
    /// A replica opens its copy of the log here and the service is unavailable (503) until a promotion.
    /// </summary>
    /// <exception cref="LogCorruptionException">The directory's term file or the replica's log is damaged.</exception>
    public void Resolve()
    {
        if (Interlocked.Exchange(ref _resolved, 1) != 0)
        {
            return;
        }

        var directory = Path.GetFullPath(_service.LogDirectory);
        var recorded = Directory.Exists(directory) ? TermFile.Read(directory) : null;
        if (!Enabled)
        {
            if (recorded is { Primary: false } replicaOnly)
            {
                throw new InvalidOperationException(
                    $"The log directory '{directory}' holds a replica's copy of a primary's log (term {replicaOnly.Term}) and this service is configured without " +
                    "replication: it would serve a copy that its primary may still be extending. Configure PersistentServicesOptions.Replication (docs/replication.md), " +
                    "or promote it.");
            }

            return;
        }

        if (_options.Role == ReplicationRole.Witness)
        {
            // A witness holds a term and nothing else, whatever it was before.
            Role = ReplicationRole.Witness;
            Term = recorded?.Term ?? 0;
        }
        else if (recorded is { } r && r.Term >= _options.Term)
        {
            Role = r.Primary ? ReplicationRole.Primary : ReplicationRole.Replica;
            Term = r.Term;
        }
        else
        {
            Role = _options.ConfiguredRole;
            Term = Role == ReplicationRole.Primary ? _options.Term : recorded?.Term ?? 0;
        }

        if (Role == ReplicationRole.Primary && NewerTermInGroup(orSame: recorded is null) is { } newer)
        {
            // The group moved on while this node was away (a failover): it rejoins as a replica instead of serving until its
            // first shipment fences it, and a node whose directory was lost does not start an empty log as a primary.
            Directory.CreateDirectory(directory);
            TermFile.Write(directory, new TermRecord(newer.Term, Primary: false, recorded?.ContentTerm ?? 0), _service.Log.FileMode);
            ReplicationServiceEvents.RejoinsAsReplica(_logger, Term, newer.Term, newer.Node.ToString());
            Role = ReplicationRole.Replica;
            Term = newer.Term;
        }

        ReplicationServiceEvents.Started(_logger, Role.ToString(), Term, directory, recorded is null ? "none" : $"term {recorded.Value.Term}, {(recorded.Value.Primary ? "primary" : "replica")}");
        if (Role == ReplicationRole.Replica && recorded is null && Log.SegmentFiles.List(directory).Count > 0)
        {
            // A log that never took part in replication is a service's own: as a replica it could be reset away by a primary.
            throw new InvalidOperationException(
                $"The log directory '{directory}' holds the log of a service that was never replicated, and this process is configured as a replica: a primary " +
                "would replace that log with its own. Start this node as the primary (Replication.Role = Primary) to keep it, or give the replica an empty " +
                "directory (docs/replication.md).");
        }

        if (Role == ReplicationRole.Witness && Log.SegmentFiles.List(directory).Count > 0)
        {
            throw new InvalidOperationException(
                $"The log directory '{directory}' holds a log, and this process is configured as a witness, which holds none: give the witness a directory of its own.");
        }

        if (Role is ReplicationRole.Replica or ReplicationRole.Witness)
        {
            // A witness keeps its term in the same kind of directory as a replica, always empty of log: it takes terms, never bytes.
            _availability.BecomeReplica();
            var logOptions = _service.BuildLogOptions();
            _replica = ReplicaLog.Open(logOptions, _logger);
            Term = _replica.Term;
        }
    }

    /// <summary>
    /// Asks the group's other nodes (and witnesses) for their terms until a majority of the group (this node included) has
    /// answered: the first that has seen a term newer than this node's (<paramref name="orSame"/>: or the same, for a node
    /// whose directory records no term, so an initial primary that lost its volume does not start an empty log in a group
    /// that already has one), or null when a majority answered and none has. A term newer than this node's was taken by
    /// a majority, so a majority's answers always include one that knows it. Each ask waits a second or two; a node that
    /// does not answer, or refuses the connection, is asked again every <see cref="ReplicationOptions.RetryInterval"/>
    /// (issue 51: a single ask that a loaded host answered too late made a killed primary come back as a primary, fenced at
    /// its first shipment, instead of a replica). When no majority answers within <see cref="StartupTermCheckTimeout"/> (the
    /// others are down), it decides as before on what it has, and the first shipment tells.
    /// </summary>
    private (long Term, Uri Node)? NewerTermInGroup(bool orSame)
    {
        var nodes = _options.Peers.Concat(_options.Witnesses).ToList();
        if (nodes.Count == 0)
        {
            return null;
        }

        return Task.Run(() => NewerTermInGroupAsync(nodes, orSame)).GetAwaiter().GetResult();
    }

    /// <summary>How long a starting primary waits for a majority of its group to say what terms they have seen: ten election timeouts, at least 5 seconds.</summary>
    private TimeSpan StartupTermCheckTimeout => TimeSpan.FromTicks(Math.Max(_options.ElectionTimeout.Ticks * 10, TimeSpan.FromSeconds(5).Ticks));

    private async Task<(long Term, Uri Node)?> NewerTermInGroupAsync(List<Uri> nodes, bool orSame)
    {
        var http = _httpClients.CreateClient(HttpClientName);
        var term = Term;
        var needed = (nodes.Count + 1) / 2; // with this node, a majority of the group: (n + 1) / 2 + 1 nodes of n + 1
        var answered = new HashSet<Uri>();
        // Real time, as the asks' own timeouts: the start waits on the network, and a test's manual clock must not hold it.
        var started = Stopwatch.GetTimestamp();
        var waitedLogged = false;
        while (true)
        {
            var asks = nodes.Where(n => !answered.Contains(n)).Select(async node =>
            {
                // A starting process's first requests are slow (connections, JIT): a second at least, so that an answer is not missed.
                using var timeout = new CancellationTokenSource(TimeSpan.FromTicks(Math.Max(_options.ElectionTimeout.Ticks * 2, TimeSpan.FromSeconds(1).Ticks)));
                try
                {
                    return (Node: node, Status: await ReplicationMessages.GetStatusAsync(http, node, this, timeout.Token).ConfigureAwait(false), Answered: true);
                }
                catch (Exception ex) when (ex is HttpRequestException or IOException or OperationCanceledException or System.Text.Json.JsonException)
                {
                    return (Node: node, Status: (ReplicationStatus?)null, Answered: false);
                }
            });
            foreach (var (node, status, ok) in await Task.WhenAll(asks).ConfigureAwait(false))
            {
                if (!ok)
                {
                    continue;
                }

                answered.Add(node);
                if (status is { } s && (s.Term > term || (orSame && s.Term == term)))
                {
                    return (s.Term, node);
                }
            }

            if (answered.Count >= needed)
            {
                return null;
            }

            var waited = Stopwatch.GetElapsedTime(started);
            if (waited >= StartupTermCheckTimeout)
            {
                ReplicationServiceEvents.TermCheckIncomplete(_logger, answered.Count + 1, nodes.Count + 1, (long)waited.TotalMilliseconds,
                    string.Join(", ", nodes.Where(n => !answered.Contains(n))));
                return null;
            }

            if (!waitedLogged)
            {
                waitedLogged = true;
                ReplicationServiceEvents.TermCheckWaits(_logger, answered.Count + 1, nodes.Count + 1, string.Join(", ", nodes.Where(n => !answered.Contains(n))));
            }

            await Task.Delay(_options.RetryInterval).ConfigureAwait(false);
        }
    }

    /// <summary>Completes when this replica is promoted (at once on a primary).</summary>
    public Task PromotedAsync(CancellationToken cancellationToken)
        => WaitsForPromotion ? Volatile.Read(ref _promoted).Task.WaitAsync(cancellationToken) : Task.CompletedTask;

    /// <summary>Completes when this primary is fenced (a newer term exists): what its demotion waits for (<see cref="StopShippingAsync"/>, <see cref="RejoinAsReplica"/>).</summary>
    public Task FencedAsync(CancellationToken cancellationToken) => Volatile.Read(ref _fencedSignal).Task.WaitAsync(cancellationToken);

    /// <summary>Whether this process is a fenced primary: its log faulted, its directory records the newer term, and it is not a replica yet.</summary>
    public bool IsFenced => Volatile.Read(ref _fencedSignal).Task.IsCompletedSuccessfully && Volatile.Read(ref _replica) is null;

    /// <summary>
    /// Makes this replica the primary of <paramref name="term"/> (docs/replication.md, "Failover"), or says why not:
    /// <list type="number">
    /// <item>the term is recorded here first, with this replica's vote for its own claim (a random id per claim: this
    ///   replica refuses the old primary's shipments and other candidates' claims of the term from now on);</item>
    /// <item>it is claimed at a majority of the group: every other node is told of it by a probe that names the claim,
    ///   and a majority (this one included) must grant it, each node to one claim per term (Raft's <c>votedFor</c>,
    ///   <see cref="ReplicaLog.Append"/>), so two candidates of one term cannot both have a majority, and the old primary,
    ///   alive or not, can have nothing more acknowledged (each acknowledgement needs a majority too, and those nodes now
    ///   refuse its term); a live old primary told of it is fenced;</item>
    /// <item>none of the nodes that took it may hold more of the log than this one (each acknowledged record is on one
    ///   of them, so this one then holds every acknowledged record): otherwise promote that one;</item>
    /// <item>the term is recorded with the primary role, the copy is closed, and recovery opens it as the service's log.</item>
    /// </list>
    /// The choice of node is the operator's (or, later, a consensus engine's); this makes the choice safe.
    /// </summary>
    public async Task<(bool Promoted, string? Why)> PromoteAsync(long term, Guid claim, CancellationToken cancellationToken)
    {
        ReplicaLog replica;
        Guid candidate;
        lock (_gate)
        {
            if (Role != ReplicationRole.Replica || _replica is not { } current)
            {
                return (false, $"this process is the {Role} of term {Term}, not a replica");
            }

            if (_promoting)
            {
                return (false, "a promotion of this replica is already under way");
            }

            if (current.IsEmpty)
            {
                return (false, "this replica holds no log yet");
            }

            // One id per claim, not per node: each promotion is a candidacy of its own, and nothing about it needs to be
            // configured (a node's Address is optional without Raft) or survive the process (a term is claimed once).
            // A switchover names the id (its old primary grants that claim only); otherwise one is drawn here.
            candidate = claim != Guid.Empty ? claim : Guid.NewGuid();
            if (!current.TryAdvanceTerm(term, candidate))
            {
                return (false, $"term {term} is not newer than term {current.Term}, which this replica has seen");
            }

            _promoting = true;
            replica = current;
        }

        try
        {
            if (await ClaimAsync(replica, term, candidate, cancellationToken).ConfigureAwait(false) is { } refused)
            {
                return (false, refused);
            }

            lock (_gate)
            {
                if (replica.Term != term)
                {
                    // Another candidate's claim of a newer term reached this replica meanwhile: that one may be the primary now.
                    return (false, $"this replica took term {replica.Term} from another candidate while it claimed term {term}");
                }

                TermFile.Write(replica.Directory, new TermRecord(term, Primary: true, replica.ContentTerm), _service.Log.FileMode);
                ReplicationServiceEvents.Promoted(_logger, term, replica.Begin, replica.DurableUntil);
                replica.Dispose();
                Volatile.Write(ref _replica, null);
                Role = ReplicationRole.Primary;
                Term = term;
            }
        }
        finally
        {
            lock (_gate)
            {
                _promoting = false;
            }
        }

        _availability.Promoted();
        Volatile.Read(ref _promoted).TrySetResult();
        return (true, null);
    }

    /// <summary>
    /// Claims <paramref name="term"/> for <paramref name="candidate"/> at every other node; null when a majority granted it
    /// and none of them holds more than <paramref name="replica"/>, else why not. A node grants it by answering in the term
    /// with where it stands (<c>position</c>, or <c>empty</c>: a witness, a new replica); <c>fenced</c> (it has seen a
    /// newer term, or is a primary) and <c>denied</c> (it granted the term to another candidate, or took it from its
    /// primary) do not count. It completes as soon as a majority granted it (issue 51): a silent node, a hung old primary
    /// among them, is not waited for up to <see cref="ClaimTimeout"/>; its probe goes on in the background until then.
    /// </summary>
    private async Task<string?> ClaimAsync(ReplicaLog replica, long term, Guid candidate, CancellationToken cancellationToken)
    {
        var http = _httpClients.CreateClient(HttpClientName);
        var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(ClaimTimeout);
        var probe = new Shipment(term, -1, 0, 0, false, ReadOnlyMemory<byte>.Empty, candidate);
        var group = _options.Peers.Count + 1 + _options.Witnesses.Count;
        var majority = (group / 2) + 1;
        var asks = _options.Peers.Concat(_options.Witnesses).Select(async node =>
        {
            try
            {
                return (Node: node, Answer: (ShipmentResult?)await ReplicationMessages.SendAsync(http, new Uri(node, ReplicationEndpoints.AppendPath), probe, this, timeout.Token)
                    .ConfigureAwait(false), Error: (string?)null);
            }
            catch (Exception ex) when (ex is HttpRequestException or OperationCanceledException or IOException or ReplicationProtocolException)
            {
                return (Node: node, Answer: null, Error: ex.Message);
            }
        }).ToList();

        // Once every ask has ended (answered, refused, or at ClaimTimeout), the timeout's source goes: the asks still under way
        // when a majority has granted go on, so that a slow node (an old primary among them) still learns of the term.
        _ = Task.WhenAll(asks).ContinueWith(_ => timeout.Dispose(), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);

        // A majority of grants is enough (Raft's rule): the claim does not wait for a silent node (a hung or cut-off old primary)
        // up to ClaimTimeout. Nodes that answer after it are not needed: every acknowledged record is on a majority of the group,
        // so on one of the granting nodes, and none of those may hold more than this replica (below).
        var answers = new List<(Uri Node, ShipmentResult? Answer, string? Error)>();
        var remaining = new List<Task<(Uri Node, ShipmentResult? Answer, string? Error)>>(asks);
        var granted = 0;
        while (remaining.Count > 0 && granted + 1 < majority)
        {
            var done = await Task.WhenAny(remaining).ConfigureAwait(false);
            remaining.Remove(done);
            var answer = await done.ConfigureAwait(false);
            answers.Add(answer);
            if (Grants(answer.Answer, term))
            {
                granted++;
            }
        }

        var took = answers.Where(a => Grants(a.Answer, term)).ToList();
        if (took.Count + 1 < majority)
        {
            var others = string.Join("; ", answers.Select(a => a.Answer is { } r ? $"{a.Node}: term {r.Term}, {r.Outcome}" : $"{a.Node}: {a.Error}"));
            return $"only {took.Count + 1} of the group's {group} nodes took term {term}, and a majority ({majority}) must, so that the old primary can have nothing more " +
                   $"acknowledged and no other candidate of the term can be promoted too ({others}). Ask again, with a newer term, when more of them answer";
        }

        foreach (var (node, answer, _) in took)
        {
            var r = answer!.Value;
            if (r.ContentTerm > replica.ContentTerm || (r.ContentTerm == replica.ContentTerm && r.DurableUntil > replica.DurableUntil))
            {
                return $"{node} {HoldsMore} (until {r.DurableUntil}, of term {r.ContentTerm}) than this replica (until {replica.DurableUntil}, of term " +
                       $"{replica.ContentTerm}): promote that one, with a term above {term}";
            }
        }

        return null;
    }

    /// <summary>What a refused promotion says when a node that took its term holds more of the log than the candidate: the coordinator then promotes that one at once.</summary>
    internal const string HoldsMore = "holds more of the log";

    /// <summary>Whether a node's answer to a claim of <paramref name="term"/> grants it: where it stands, in that term.</summary>
    private static bool Grants(ShipmentResult? answer, long term)
        => answer is { } r && r.Term == term && r.Outcome is ShipmentOutcome.Position or ShipmentOutcome.Empty;

    /// <summary>Where each term's part of this primary's log begins (<see cref="TermHistory"/>): what its shippers cut a rejoining replica back to.</summary>
    public TermHistory History { get; private set; } = TermHistory.Empty;

    /// <summary>
    /// The primary's log is open and nothing of this term is in it yet (recovery appends its first record after this): the
    /// term history records that this term begins at the log's durable end, durably, before any byte of the term is
    /// written. A primary that restarts in its own term keeps the entry it had (its term began before).
    /// </summary>
    public void TermStarts(DurableLog log)
    {
        if (!Enabled || Role != ReplicationRole.Primary)
        {
            return;
        }

        var start = log.LocalDurableUntil; // nothing is appended at or before it from now on: a lower bound of this term's bytes

        var recorded = TermHistory.Read(log.Directory);
        var history = recorded ?? (log.BeginAddress < start
            // A log of a version that kept no history (or never replicated): all of it is taken as of the newest term its
            // directory saw, which never lets a cut reach past where it may differ.
            ? TermHistory.Of(new TermStart(Term, log.BeginAddress))
            : TermHistory.Empty);
        var with = history.With(Term, start);
        if (recorded is null || with != history)
        {
            with.Write(log.Directory, log.FileMode);
        }

        History = with;
    }

    /// <summary>
    /// The primary's log is open (recovery's first half, before anything is acknowledged): its directory records this term
    /// and the primary role; with replicas, from now on its durable waits also wait for them, and a shipper per replica starts.
    /// </summary>
    /// <exception cref="LogFaultedException">This primary was fenced while recovery opened its log: it must not serve it.</exception>
    public void LogOpened(DurableLog log)
    {
        if (!Enabled)
        {
            return;
        }

        var peers = _options.Peers;
        lock (_gate)
        {
            // Under the gate a fence takes too: either it comes first and the open fails, or the watermark it faults is in place.
            if (Role != ReplicationRole.Primary)
            {
                // Fenced during the open (a newer term reached it after the log opened): without its watermark the log would
                // acknowledge alone. The open fails, and the node demotes itself (docs/replication.md, "Demotion").
                throw new LogFaultedException($"This primary was fenced by term {Term} while recovery opened its log: another node is the primary now.");
            }

            TermFile.Write(log.Directory, new TermRecord(Term, Primary: true, Term), log.FileMode);
            if (peers.Count == 0)
            {
                return;
            }

            var required = new ReplicationWatermark(peers.Count, _options.EffectiveRequiredReplicas);
            log.RequireReplication(required);
            _watermark = required;
        }

        var watermark = _watermark;
        var logOptions = _service.BuildLogOptions();
        _shipping = [.. peers.Select((address, index) => new LogShipper(this, index, address, log, watermark, logOptions,
            _httpClients.CreateClient(HttpClientName), _options, _logger, _runtime.Time))];
        lock (_gate)
        {
            // The shippers of this log: a demotion stops them (StopShippingAsync) before the log closes, the host's stop as well.
            _shipStop = CancellationTokenSource.CreateLinkedTokenSource(_stopping.Token);
            var token = _shipStop.Token;
            foreach (var shipper in _shipping)
            {
                _shippers.Add(Task.Run(() => shipper.RunAsync(token)));
            }
        }

        if (Interlocked.Exchange(ref _replicationObserved, 1) == 0)
        {
            // Once per process: the gauges read whichever shippers this node has now (none while it is a replica).
            _runtime.Metrics.ObserveReplication(() => Volatile.Read(ref _shipping).Select(s => (s.Replica.ToString(), s.LagBytes, s.Reachable)));
        }
    }

    /// <summary>
    /// A fenced primary's demotion, first step (docs/replication.md, "Demotion"): its shippers stop and are disposed, and it
    /// forgets its watermark and term history; the log they shipped from is closed next, by the runtime.
    /// </summary>
    public async Task StopShippingAsync()
    {
        Task[] shippers;
        CancellationTokenSource? stop;
        lock (_gate)
        {
            shippers = [.. _shippers];
            _shippers.Clear();
            stop = _shipStop;
            _shipStop = null;
        }

        if (stop is not null)
        {
            await stop.CancelAsync().ConfigureAwait(false);
        }

        await Task.WhenAll(shippers).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        foreach (var shipper in Volatile.Read(ref _shipping))
        {
            shipper.Dispose();
        }

        stop?.Dispose();
        Volatile.Write(ref _shipping, []);
        _watermark = null;
        History = TermHistory.Empty;
    }

    /// <summary>
    /// A fenced primary's demotion, last step, once its log is closed: it opens its directory as a replica's copy (what a
    /// restart would do: its term file records the newer term and the replica role), answers shipments and claims from now
    /// on, and waits for a promotion as any replica. The new primary's shipper cuts back what of its log the group never
    /// held, or resets it (docs/replication.md, "Rejoining by cutting back").
    /// </summary>
    /// <exception cref="LogCorruptionException">The directory's term file or log is damaged.</exception>
    public void RejoinAsReplica()
    {
        var logOptions = _service.BuildLogOptions();
        var replica = ReplicaLog.Open(logOptions, _logger);
        lock (_gate)
        {
            Volatile.Write(ref _heardAt, 0);
            Volatile.Write(ref _promoted, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));
            Volatile.Write(ref _replica, replica);
            Role = ReplicationRole.Replica;
            Volatile.Write(ref _fencedSignal, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));
        }

        _availability.Demoted();
    }

    /// <summary>Where the primary's anchor stands (what a replica writes once it holds the checkpoint); 0 before the first.</summary>
    public long AnchoredLsn => _runtime.Analysis is null || _runtime.OpenCheckpointer is not { } checkpointer ? 0 : checkpointer.AnchoredLsn;

    /// <summary>Whether the log this primary opened was new (created at this start): it must never replace a replica's log.</summary>
    public bool LogWasNew => _runtime.Log.OpenReport.IsNew;

    /// <summary>
    /// A replica answered for a newer term: this primary is fenced. Its directory records the newer term and the replica
    /// role (a restart makes it a replica), and its log faults: nothing more is acknowledged, requests get 503 problem
    /// <c>replica</c> (gateways and clients go to the group's other nodes), liveness fails.
    /// </summary>
    public void Fence(long newerTerm, string source) => Fence(newerTerm, source, byHandover: false);

    /// <summary>
    /// <see cref="Fence(long, string)"/>; while a switchover waits for its target's promotion to exactly
    /// <paramref name="newerTerm"/>, only the switchover itself (<paramref name="byHandover"/>) fences: the target takes the
    /// term before it claims it, and a heartbeat it answers with that term meanwhile must not fence this primary before it
    /// has voted (it acknowledges nothing while it hands over; if the promotion fails, the next such answer fences it).
    /// </summary>
    private void Fence(long newerTerm, string source, bool byHandover)
    {
        lock (_gate)
        {
            if (Role != ReplicationRole.Primary || newerTerm <= Term || (!byHandover && _handingOverTerm != 0 && newerTerm == _handingOverTerm))
            {
                return;
            }

            Role = ReplicationRole.Replica;
            // A vote this primary gave in the term (a switchover's claim it granted, GrantHandoverClaim) is kept: restarted, it denies another candidate of it.
            var directory = _runtime.OpenLog?.Directory ?? Path.GetFullPath(_service.LogDirectory);
            var vote = TermFile.Read(directory) is { Primary: false } granted && granted.Term == newerTerm ? granted.VotedFor : Guid.Empty;
            TermFile.Write(directory, new TermRecord(newerTerm, Primary: false, Term, vote), _service.Log.FileMode);
        }

        ReplicationServiceEvents.Fenced(_logger, Term, newerTerm, source);
        _availability.Fenced();
        _watermark?.Fence(new LogFaultedException(
            $"This primary (term {Term}) was fenced by term {newerTerm} ({source}): another node is the primary now. Nothing more is acknowledged " +
            "here; it rejoins as a replica by itself (docs/replication.md, \"Demotion\")."));
        Volatile.Read(ref _fencedSignal).TrySetResult();
    }

    /// <summary>A primary refuses to go on (its log is not the newest of its group): it fails as a faulted log does, with why.</summary>
    public void Refuse(string why)
    {
        ReplicationServiceEvents.Refused(_logger, why);
        _watermark?.Fence(new LogFaultedException(why));
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _stopping.CancelAsync().ConfigureAwait(false);
        await StopShippingAsync().ConfigureAwait(false);
        lock (_gate)
        {
            _replica?.Dispose();
            _replica = null;
        }

        Volatile.Read(ref _promoted).TrySetCanceled();
        Volatile.Read(ref _fencedSignal).TrySetCanceled();
        _stopping.Dispose();
    }
}
