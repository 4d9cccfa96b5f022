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
internal sealed class ReplicationNode : IAsyncDisposable
{
    /// <summary>The named client shipments go out on.</summary>
    public const string HttpClientName = "PersistentServices.Replication";

    private readonly PersistentServicesOptions _service;
    private readonly ReplicationOptions _options;
    private readonly PersistentRuntime _runtime;
    private readonly ServiceAvailability _availability;
    private readonly IHttpClientFactory _httpClients;
    private readonly ILogger<ReplicationNode> _logger;
    private readonly TaskCompletionSource _promoted = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly CancellationTokenSource _stopping = new();
    private readonly Lock _gate = new();
    private readonly List<Task> _shippers = [];
    private ReplicaLog? _replica;
    private ReplicationWatermark? _watermark;
    private LogShipper[] _shipping = [];
    private int _resolved;
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
    }

    /// <summary>Whether replication is configured at all.</summary>
    public bool Enabled => _options.Role != ReplicationRole.None;

    /// <summary>The role this process plays now.</summary>
    public ReplicationRole Role { get; private set; }

    /// <summary>The term this process plays it in (a replica: the newest it has seen).</summary>
    public long Term
    {
        get => Volatile.Read(ref _replica) is { } replica ? replica.Term : _term;
        private set => _term = value;
    }

    private long _term;

    /// <summary>Whether this process started as a replica and is not yet promoted: recovery waits for <see cref="PromotedAsync"/>.</summary>
    public bool WaitsForPromotion => Role == ReplicationRole.Replica;

    /// <summary>The replica's copy of the log, while this process is a replica.</summary>
    public ReplicaLog? Replica => Volatile.Read(ref _replica);

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

        if (recorded is { } r && r.Term >= _options.Term)
        {
            Role = r.Primary ? ReplicationRole.Primary : ReplicationRole.Replica;
            Term = r.Term;
        }
        else
        {
            Role = _options.Role;
            Term = Role == ReplicationRole.Primary ? _options.Term : recorded?.Term ?? 0;
        }

        ReplicationServiceEvents.Started(_logger, Role.ToString(), Term, directory, recorded is null ? "none" : $"term {recorded.Value.Term}, {(recorded.Value.Primary ? "primary" : "replica")}");
        if (Role == ReplicationRole.Replica)
        {
            _availability.BecomeReplica();
            var logOptions = _service.BuildLogOptions();
            _replica = ReplicaLog.Open(logOptions, _logger);
            Term = _replica.Term;
        }
    }

    /// <summary>Completes when this replica is promoted (at once on a primary).</summary>
    public Task PromotedAsync(CancellationToken cancellationToken)
        => Role == ReplicationRole.Replica ? _promoted.Task.WaitAsync(cancellationToken) : Task.CompletedTask;

    /// <summary>
    /// Makes this replica the primary of <paramref name="term"/>: the term is recorded first (durably, with the primary
    /// role), the copy of the log is closed, and recovery opens it as this service's log. False (with why) when this
    /// process is not a replica or the term is not newer than every term it has seen.
    /// </summary>
    public bool TryPromote(long term, out string? why)
    {
        lock (_gate)
        {
            if (Role != ReplicationRole.Replica || _replica is not { } replica)
            {
                why = $"this process is the {Role} of term {Term}, not a replica";
                return false;
            }

            if (term <= replica.Term)
            {
                why = $"term {term} is not newer than term {replica.Term}, which this replica has seen";
                return false;
            }

            if (replica.IsEmpty)
            {
                why = "this replica holds no log yet";
                return false;
            }

            TermFile.Write(replica.Directory, new TermRecord(term, Primary: true, replica.ContentTerm), _service.Log.FileMode);
            ReplicationServiceEvents.Promoted(_logger, term, replica.Begin, replica.DurableUntil);
            replica.Dispose();
            Volatile.Write(ref _replica, null);
            Role = ReplicationRole.Primary;
            Term = term;
            why = null;
        }

        _availability.Promoted();
        _promoted.TrySetResult();
        return true;
    }

    /// <summary>
    /// The primary's log is open (recovery's first half, before anything is acknowledged): its directory records this term
    /// and the primary role; with replicas, from now on its durable waits also wait for them, and a shipper per replica starts.
    /// </summary>
    public void LogOpened(DurableLog log)
    {
        if (!Enabled || Role != ReplicationRole.Primary)
        {
            return;
        }

        TermFile.Write(log.Directory, new TermRecord(Term, Primary: true, Term), log.FileMode);
        if (_options.Replicas.Count == 0)
        {
            return;
        }

        var watermark = new ReplicationWatermark(_options.Replicas.Count, _options.EffectiveRequiredReplicas);
        log.RequireReplication(watermark);
        _watermark = watermark;
        var logOptions = _service.BuildLogOptions();
        _shipping = [.. _options.Replicas.Select((address, index) => new LogShipper(this, index, address, log, watermark, logOptions,
            _httpClients.CreateClient(HttpClientName), _options, _logger))];
        lock (_gate)
        {
            foreach (var shipper in _shipping)
            {
                _shippers.Add(Task.Run(() => shipper.RunAsync(_stopping.Token)));
            }
        }
    }

    /// <summary>Where the primary's anchor stands (what a replica writes once it holds the checkpoint); 0 before the first.</summary>
    public long AnchoredLsn => _runtime.Analysis is null ? 0 : _runtime.Checkpointer.AnchoredLsn;

    /// <summary>Whether the log this primary opened was new (created at this start): it must never replace a replica's log.</summary>
    public bool LogWasNew => _runtime.Log.OpenReport.IsNew;

    /// <summary>
    /// A replica answered for a newer term: this primary is fenced. Its directory records the newer term and the replica
    /// role (a restart makes it a replica), and its log faults: nothing more is acknowledged, requests get 503, liveness fails.
    /// </summary>
    public void Fence(long newerTerm, string replica)
    {
        lock (_gate)
        {
            if (Role != ReplicationRole.Primary || newerTerm <= Term)
            {
                return;
            }

            Role = ReplicationRole.Replica;
            TermFile.Write(_runtime.Log.Directory, new TermRecord(newerTerm, Primary: false, Term), _service.Log.FileMode);
        }

        ReplicationServiceEvents.Fenced(_logger, Term, newerTerm, replica);
        _watermark?.Fence(new LogFaultedException(
            $"This primary (term {Term}) was fenced: replica {replica} has seen term {newerTerm}, so another node is the primary now. Nothing more is acknowledged " +
            "here; restart the process and it rejoins as a replica (docs/replication.md)."));
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
        Task[] shippers;
        lock (_gate)
        {
            shippers = [.. _shippers];
        }

        await Task.WhenAll(shippers).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        foreach (var shipper in _shipping)
        {
            shipper.Dispose();
        }

        lock (_gate)
        {
            _replica?.Dispose();
            _replica = null;
        }

        _promoted.TrySetCanceled();
        _stopping.Dispose();
    }
}
