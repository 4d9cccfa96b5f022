using Microsoft.Extensions.Options;
using PersistentServices.Log;

namespace PersistentServices.Hosting;

/// <summary>
/// Whether the service can serve what asks now (<see cref="CanServe"/>): where recovery stands (<see cref="Stage"/>, the
/// recovery state machine), the log's fault, the drain (persistent requests counted while they execute,
/// <see cref="BeginDrain"/>) and the token that stops calls' retries (<see cref="CallsAbandoned"/>). One per service, a
/// singleton: recovery moves it forward (<c>Recovery/LogOpener</c>, <c>RecoveryHostedService</c>), the host's stop drains it.
/// </summary>
[System.Diagnostics.CodeAnalysis.SuppressMessage("Reliability", "CA1001:Types that own disposable fields should be disposable",
    Justification = "The calls token is never disposed: a handler may still read it after the host stopped, and a CTS without timers holds nothing to free.")]
internal sealed class ServiceAvailability
{
    private readonly PersistentServicesOptions _options;
    private readonly TimeProvider _time;
    private readonly CancellationTokenSource _callsAbandoned = new();
    private DurableLog? _log;
    private volatile RecoveryStage _stage;
    private Exception? _failure;
    private int _executing;
    private long _drainBegan;
    private volatile bool _handingOver;
    private volatile bool _fenced;

    public ServiceAvailability(IOptions<PersistentServicesOptions> options, TimeProvider time)
    {
        _options = options.Value;
        _time = time;
    }

    public RecoveryStage Stage => _stage;

    /// <summary>Why recovery failed, once it did.</summary>
    public Exception? Failure => _failure;

    /// <summary>The log's fault, once it faulted.</summary>
    public LogFaultedException? LogFault => _log?.Fault;

    /// <summary>Whether <paramref name="kind"/> may go on now (<see cref="RequestKind"/> says which test each kind gets).</summary>
    public bool CanServe(RequestKind kind) => kind switch
    {
        RequestKind.PersistentRequest or RequestKind.AdmittedRequest or RequestKind.SessionInspection
            => _log is { Fault: null } && _stage is RecoveryStage.Replaying or RecoveryStage.Ready or RecoveryStage.Draining,
        RequestKind.CallRetry
            => _stage != RecoveryStage.Draining || Volatile.Read(ref _drainBegan) is var began && (began == 0 || _time.GetElapsedTime(began) < _options.Calls.DrainRetryTime),
        _ => _log is { Fault: null } && _stage is RecoveryStage.Replaying or RecoveryStage.Ready && !_handingOver,
    };

    /// <summary>
    /// Whether this primary is handing its role over to a replica (a switchover, docs/replication.md): it admits nothing new
    /// (503 problem <c>replica</c>, so gateways and clients go to the group's other nodes), and what runs finishes.
    /// </summary>
    public bool IsHandingOver => _handingOver;

    /// <summary>Whether a request refused now should be told to go to another node of the group (503 <c>replica</c>): a replica, or a primary handing over.</summary>
    public bool AnswersAsReplica => _handingOver || _fenced || _stage == RecoveryStage.Replica;

    /// <summary>
    /// A switchover begins: from now on new persistent requests, sessions, read-only requests and background work are
    /// refused as during a drain, and persistent requests already counted (<see cref="Executing"/>) finish. False when the
    /// service serves nothing now (recovering, failed, a replica) or hands over already.
    /// </summary>
    public bool BeginHandover()
    {
        if (_handingOver || _log is not { Fault: null } || _stage is not (RecoveryStage.Replaying or RecoveryStage.Ready or RecoveryStage.Draining))
        {
            return false;
        }

        _handingOver = true;
        Interlocked.MemoryBarrier(); // a request counted after this sees the flag; one counted before is seen in Executing
        return true;
    }

    /// <summary>The switchover ended: refused (this primary serves again), or done (it is fenced, and answers as a replica: <see cref="Fenced"/>).</summary>
    public void EndHandover() => _handingOver = false;

    /// <summary>Whether the host is draining (it stops: running requests finish, new ones get 503).</summary>
    public bool IsDraining => _stage == RecoveryStage.Draining;

    /// <summary>Persistent requests executing now (a drain waits for them).</summary>
    public int Executing => Volatile.Read(ref _executing);

    /// <summary>Counts a persistent request as executing until the returned value is disposed; null while draining or handing over (refuse it).</summary>
    public ExecutingRequest? TryBeginExecution()
    {
        Interlocked.Increment(ref _executing);
        if (_stage == RecoveryStage.Draining || _handingOver)
        {
            Interlocked.Decrement(ref _executing);
            return null;
        }

        return new ExecutingRequest(this);
    }

    /// <summary>A persistent request counted as executing (<see cref="TryBeginExecution"/>) until disposed.</summary>
    public readonly struct ExecutingRequest(ServiceAvailability availability) : IDisposable
    {
        public void Dispose() => Interlocked.Decrement(ref availability._executing);
    }

    /// <summary>The host is stopping: new persistent, read-only and session requests get 503; running ones finish.</summary>
    public void BeginDrain()
    {
        if (_stage is RecoveryStage.Replaying or RecoveryStage.Ready)
        {
            Interlocked.CompareExchange(ref _drainBegan, _time.GetTimestamp(), 0);
            _stage = RecoveryStage.Draining;
        }
    }

    /// <summary>
    /// Fires when calls to other services should stop being retried: the host's shutdown timeout ended the drain, or the
    /// host stopped with nothing to drain (recovering). Until then a call of a running request is retried while the
    /// service drains, so the request finishes and its reply goes out (docs/calls.md, condition 4).
    /// </summary>
    public CancellationToken CallsAbandoned => _callsAbandoned.Token;

    /// <summary>Stops the retries of every call in flight (<see cref="CallsAbandoned"/>); their requests are abandoned (503).</summary>
    public void AbandonCalls() => _callsAbandoned.Cancel(); // never disposed: a handler may still read its token (a CTS without timers holds nothing to free)

    /// <summary>This process is a replica: nothing is served until it is promoted (<see cref="Promoted"/>).</summary>
    public void BecomeReplica() => _stage = RecoveryStage.Replica;

    /// <summary>
    /// This primary was fenced (a newer term exists; its log faults): from now on it answers as a replica, so gateways and
    /// clients go to the group's other nodes, also if recovery moves the stage on afterwards (a fence during the open).
    /// </summary>
    public void Fenced()
    {
        _fenced = true;
        _stage = RecoveryStage.Replica;
    }

    /// <summary>
    /// Whether this fenced primary is demoting itself (docs/replication.md, "Demotion"): its log faulted, and liveness
    /// stays healthy meanwhile, since no restart is needed. False again once it is a replica, or when its demotion failed.
    /// </summary>
    public bool IsRejoining
    {
        get => _rejoining;
        set => _rejoining = value;
    }

    private volatile bool _rejoining;

    /// <summary>
    /// A fenced primary closed its log and rejoined its group as a replica (docs/replication.md, "Demotion"): what the fence
    /// and the log's end left (the log, its fault, a replay that failed on it) is forgotten, and it waits for a promotion
    /// as a replica that started so.
    /// </summary>
    public void Demoted()
    {
        _rejoining = false;
        _log = null;
        _failure = null;
        _handingOver = false;
        _fenced = false;
        _stage = RecoveryStage.Replica;
    }

    /// <summary>The replica was promoted: recovery opens its copy of the log next (requests wait for it, as at a start).</summary>
    public void Promoted()
    {
        if (_stage == RecoveryStage.Replica)
        {
            _stage = RecoveryStage.NotStarted;
        }
    }

    /// <summary>Recovery began opening the log.</summary>
    public void BeginOpening() => _stage = RecoveryStage.Scanning;

    /// <summary>The log is open: its fault, from now on, is the service's.</summary>
    public void LogOpened(DurableLog log) => _log = log;

    /// <summary>The analysis scan is done and the new epoch durable: requests are served while recovered sessions replay.</summary>
    public void Opened() => _stage = RecoveryStage.Replaying;

    /// <summary>Every recovered session has replayed.</summary>
    public void MarkReady()
    {
        if (_stage == RecoveryStage.Replaying)
        {
            _stage = RecoveryStage.Ready;
        }
    }

    /// <summary>Recovery failed: nothing is served from the log any more.</summary>
    public void Fail(Exception error)
    {
        _failure ??= error;
        _stage = RecoveryStage.Failed;
    }
}
