using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Hosting;

/// <summary>
/// The service's log host: its one log, shared state store and service checkpointer once recovery opened them
/// (<see cref="LogOpener"/>, from <c>UsePersistentServices()</c> on), its sessions, its place in a service domain and what
/// the service is configured with. A singleton, disposed (log committed and closed) when the host stops. Whether the
/// service can serve now is <see cref="ServiceAvailability"/>'s.
/// </summary>
internal sealed class PersistentRuntime : IAsyncDisposable
{
    private DurableLog? _log;

    public PersistentRuntime(IOptions<PersistentServicesOptions> options, TimeProvider time, PersistentServicesMetrics metrics, Checkpoints.CrashPoints crashPoints,
        ServiceAvailability availability, IHttpClientFactory httpClients, ILogger<PersistentRuntime> logger, Serialization.ValueCodec? codec = null,
        Testing.ReplayCheckRun? replayCheck = null)
    {
        Metrics = metrics;
        CrashPoints = crashPoints;
        Availability = availability;
        Options = options.Value;
        replayCheck?.Apply(Options); // the replay check recovers its sandbox's copy, whatever the application configured
        Time = time;
        Codec = codec ?? new Serialization.OrleansValueCodec();
        Sessions = new SessionTable(new SessionMemory(Options.EffectiveSessionMemoryBudgetBytes, Options.MaxBufferedReplyBytes));
        metrics.ObserveSessions(Sessions);

        // One of each, whichever request or hosted service asks first (Lazy's default mode runs the factory once): with
        // '??=' a flush from a member racing recovery's first use made two domains, and recovery learned the recovered
        // state numbers into the one the endpoints did not use (issue 49).
        _domain = new(() => new Domain.ServiceDomain(this, httpClients, logger));
        _peers = new(() => new Calls.PeerAuthentication(Options.Calls, Options.ServiceName, time, logger));
    }

    /// <summary>The service's instruments (meter <c>PersistentServices</c>, from the host's <c>IMeterFactory</c>).</summary>
    public PersistentServicesMetrics Metrics { get; }

    /// <summary>The crash points a crash test armed (DI, or the configuration's <c>PERSISTENTSERVICES_CRASH_POINT</c>; <see cref="Checkpoints.CrashPoints.None"/> otherwise).</summary>
    public Checkpoints.CrashPoints CrashPoints { get; }

    /// <summary>Where recovery stands, the drain and the calls token: whether the service can serve what asks (DI singleton).</summary>
    public ServiceAvailability Availability { get; }

    public PersistentServicesOptions Options { get; }

    /// <summary>How user values (session state in checkpoints, shared variables) are written to the log.</summary>
    public Serialization.ValueCodec Codec { get; }

    /// <summary>The service checkpoint, anchor and truncation (valid once the log is open).</summary>
    public Checkpoints.ServiceCheckpointer Checkpointer => _checkpointer ?? throw new InvalidOperationException("The persistent log is not open yet.");

    private Checkpoints.ServiceCheckpointer? _checkpointer;

    /// <summary>The service checkpointer, or null while no log is open (before recovery, or on a primary demoted to a replica).</summary>
    public Checkpoints.ServiceCheckpointer? OpenCheckpointer => _checkpointer;

    /// <summary>This service's place in its service domain (inactive without members).</summary>
    public Domain.ServiceDomain Domain => _domain.Value;

    private readonly Lazy<Domain.ServiceDomain> _domain;

    /// <summary>Signs what this service sends to the deployment's other services and verifies what they send (docs/calls.md, "Who may call").</summary>
    public Calls.PeerAuthentication Peers => _peers.Value;

    private readonly Lazy<Calls.PeerAuthentication> _peers;

    /// <summary>
    /// Before a session checkpoint: in a domain, a distributed flush of the session's DV ([MSP §3.2]: the checkpointed state
    /// must never be an orphan). False when it cannot be made now (a member out of reach, or the session is an orphan):
    /// the checkpoint waits for a later occasion.
    /// </summary>
    public async Task<bool> BeforeSessionCheckpointAsync(Sessions.Session session, CancellationToken cancellationToken)
    {
        if (!Domain.IsMember(Options.ServiceName))
        {
            return true;
        }

        try
        {
            await Domain.FlushAsync(session.Dv, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (Http.RequestAbandonedException)
        {
            return false;
        }
    }

    /// <summary>Rolls back sessions found to be orphans (set when the service is in a domain).</summary>
    public Domain.OrphanRecovery? Orphans { get; set; }

    /// <summary>While recovered sessions replay: their queue, so a waiting client's session goes first.</summary>
    public ReplayQueue? Replays { get; set; }

    /// <summary>Sessions whose replay diverged and that are quarantined.</summary>
    public int QuarantinedSessions
    {
        get
        {
            // Counted among the live sessions (a health probe's pass over the table): one that ends, expires or is released
            // no longer counts, so health returns to Healthy once the last one is gone.
            var count = 0;
            foreach (var session in Sessions.Enumerate())
            {
                if (session.Diverged is not null && !session.Ended)
                {
                    count++;
                }
            }

            return count;
        }
    }

    public TimeProvider Time { get; }

    public SessionTable Sessions { get; }

    /// <summary>What the analysis scan found (set by <see cref="LogOpener"/> once it ran).</summary>
    public AnalysisResult? Analysis { get; private set; }

    /// <summary>The service's shared variables (valid once the log is open).</summary>
    public SharedStateStore Shared => _shared ?? throw new InvalidOperationException("The persistent log is not open yet.");

    /// <summary>The failure-free period the service is in ([MSP §3.1]; set by <see cref="LogOpener"/>).</summary>
    public long Epoch { get; set; }

    private SharedStateStore? _shared;

    /// <summary>
    /// The service's shared variables once the analysis scan rolled them forward and the new epoch is durable, else null:
    /// what the persistence middleware enters for each request (<see cref="SharedStateStore.Enter"/>), so the service's
    /// shared state handles find this store and no other service's.
    /// </summary>
    public SharedStateStore? ServingShared => Volatile.Read(ref _servingShared);

    private SharedStateStore? _servingShared;

    /// <summary>The open log, or null before recovery opened it.</summary>
    public DurableLog? OpenLog => _log;

    /// <summary>The open log; throws before recovery opened it.</summary>
    public DurableLog Log => _log ?? throw new InvalidOperationException("The persistent log is not open yet.");

    /// <summary>Recovery opened the log: it is held here (and closed by <see cref="DisposeAsync"/>), and its fault is the service's.</summary>
    public void LogOpened(DurableLog log)
    {
        _log = log;
        Availability.LogOpened(log);
    }

    /// <summary>Recovery created the shared state store over the open log.</summary>
    public void SharedOpened(SharedStateStore shared) => _shared = shared;

    /// <summary>The analysis scan ran: what it found, and the checkpointer over what it rebuilt.</summary>
    public void Analyzed(AnalysisResult analysis, Checkpoints.ServiceCheckpointer checkpointer)
    {
        Analysis = analysis;
        _checkpointer = checkpointer;
    }

    /// <summary>The new epoch is durable: requests enter the shared state store from now on (<see cref="ServingShared"/>).</summary>
    public void ServeShared() => Volatile.Write(ref _servingShared, _shared);

    /// <summary>
    /// A fenced primary's demotion (docs/replication.md, "Demotion"): what recovery opened goes, as a restart would lose it
    /// (the checkpointer, the shared state store, the sessions, the log, closed), so that the directory can be reopened as a
    /// replica's copy and a later promotion recovers from it again. Called once no persistent request runs any more (the
    /// log faulted when the primary was fenced, so nothing of it was acknowledged since).
    /// </summary>
    public async Task CloseForRejoinAsync()
    {
        Volatile.Write(ref _servingShared, null);
        _shared?.AbortReservations();
        Analysis = null;
        var checkpointer = _checkpointer;
        _checkpointer = null;
        checkpointer?.Dispose();
        Replays = null;
        _shared = null;
        Epoch = 0;
        foreach (var session in Sessions.All.ToList())
        {
            Sessions.Remove(session.Id);
            session.FailReplay(new LogFaultedException("This node was fenced and rejoins its group as a replica: the session is served by the group's primary."));
        }

        var log = _log;
        _log = null;
        if (log is not null)
        {
            await log.DisposeAsync().ConfigureAwait(false);
        }
    }

    /// <summary>The runtime was disposed (its log closed): a host stopped after its disposal (WebApplicationFactory does that) finds nothing to drain.</summary>
    public bool IsDisposed => Volatile.Read(ref _disposed) != 0;

    private int _disposed;

    /// <summary>
    /// Closes what recovery opened. An open still running ends before: <see cref="LogOpener"/>, created after this runtime,
    /// is disposed before it by the container.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        Availability.AbandonCalls();
        _checkpointer?.Dispose();
        if (_domain.IsValueCreated)
        {
            _domain.Value.Dispose();
        }

        if (_log is { } log)
        {
            await log.DisposeAsync().ConfigureAwait(false);
        }
    }
}
