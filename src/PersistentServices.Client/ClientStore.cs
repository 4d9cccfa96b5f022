using Google.Protobuf;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Client;

/// <summary>
/// The client's durable store (docs/client.md, "The store"): the project's own log (<see cref="DurableLog"/>) in one
/// directory per client, holding each request from before it is first sent until the application has its reply. Every
/// record is forced before the step it guards ([EOS middleware Fig. 2]): a request before it is sent (t1); on a live call,
/// the handover mark before the reply reaches the application and before the session takes its next request (t8 and t12
/// in one force: the reply itself is not stored, the service still holds it until that next request); on a resend by
/// RecoverAsync, the reply (t8) and then its handover mark. Opening the store reads it back: the pending entries (stored,
/// not handed over) and the sessions that are idle.
/// </summary>
internal sealed class ClientStore : IAsyncDisposable
{
    /// <summary>Largest body <see cref="PersistentClientOptions.MaxBodyBytes"/> may allow (a record holds it and its headers).</summary>
    public const int MaxBodyLimit = 960 << 10;

    /// <summary>The <see cref="Payload.Tag"/> of the client's records ("PSC1").</summary>
    public const uint PayloadTag = 0x50534331;

    /// <summary>
    /// Most finished operation ids remembered: one record lists them all before each truncation, and a 256-character id
    /// takes at most 769 bytes, so 1024 of them fit a record.
    /// </summary>
    public const int MaxFinishedOperationRetention = 1024;

    /// <summary>Handovers between two truncations of the log (it keeps only what pending entries need).</summary>
    internal int TruncateEvery { get; set; } = 256;

    private readonly Lock _gate = new();
    private readonly Dictionary<long, ClientEntry> _pending = [];
    private readonly SemaphoreSlim _truncating = new(1, 1);
    private readonly HashSet<string> _pendingOperations = new(StringComparer.Ordinal);
    private readonly Dictionary<string, bool> _finished = new(StringComparer.Ordinal);
    private readonly Queue<string> _finishedOrder = new();
    private readonly int _finishedRetention;
    private readonly ILogger _logger;
    private int _doneSinceTruncation;

    private ClientStore(DurableLog log, int finishedRetention, ILogger logger)
    {
        Log = log;
        _finishedRetention = finishedRetention;
        _logger = logger;
    }

    public DurableLog Log { get; }

    /// <summary>Sessions whose last request was answered, read back by <see cref="OpenAsync"/>: the pool starts with them.</summary>
    public IReadOnlyList<ClientSession> IdleSessions { get; private set; } = [];

    public int PendingCount
    {
        get
        {
            lock (_gate)
            {
                return _pending.Count;
            }
        }
    }

    /// <summary>
    /// Opens the store in <paramref name="directory"/> and reads it back, remembering up to <paramref name="finishedRetention"/>
    /// finished operation ids (<see cref="PersistentClientOptions.FinishedOperationRetention"/>).
    /// </summary>
    public static async Task<ClientStore> OpenAsync(string directory, ILogger logger, CancellationToken cancellationToken, int finishedRetention = MaxFinishedOperationRetention)
    {
        var log = await DurableLog.OpenAsync(new LogOptions
        {
            Directory = directory,
            PageSizeBits = 21,
            MemorySizeBits = 23,
            SegmentSizeBits = 26,
            MaxRecordBytes = (1 << 20) - LogOptions.EntryOverhead,
        }, logger, cancellationToken).ConfigureAwait(false);
        var store = new ClientStore(log, finishedRetention, logger);
        try
        {
            await store.ReadBackAsync(cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await log.DisposeAsync().ConfigureAwait(false);
            throw;
        }

        return store;
    }

    private async Task ReadBackAsync(CancellationToken cancellationToken)
    {
        // Per session: its last request's entry and number, in log order.
        var sessions = new Dictionary<string, (string Authority, long Sequence, long EntryId)>(StringComparer.Ordinal);
        var records = 0;
        await foreach (var record in Log.ScanAsync(Log.BeginAddress, Log.DurableUntil, cancellationToken).ConfigureAwait(false))
        {
            if (record.Kind != RecordKind.Payload || record.Parse(Payload.Parser) is not { Tag: PayloadTag } payload)
            {
                continue;
            }

            records++;
            var (type, value) = ClientRecords.Decode(payload.Data.Span, record.Lsn);
            switch (type)
            {
                case ClientRecordType.Request:
                    var request = (StoredRequest)value;
                    if (_pending.TryGetValue(request.EntryId, out var moved))
                    {
                        moved.Request = request;
                    }
                    else
                    {
                        _pending[request.EntryId] = new ClientEntry(request, record.Lsn);
                    }

                    sessions[request.SessionId] = (new Uri(request.Uri).GetLeftPart(UriPartial.Authority), request.Sequence, request.EntryId);
                    break;

                case ClientRecordType.Reply:
                    var reply = (StoredReply)value;
                    if (_pending.TryGetValue(reply.EntryId, out var answered))
                    {
                        answered.Reply = reply;
                    }

                    break;

                case ClientRecordType.Delivered:
                    if (_pending.Remove((long)value, out var delivered))
                    {
                        RememberFinished(delivered.Request.OperationId, replyHandedOver: true);
                    }

                    break;

                case ClientRecordType.FinishedOperations:
                    foreach (var finished in (List<FinishedOperation>)value)
                    {
                        RememberFinished(finished.OperationId, finished.ReplyHandedOver);
                    }

                    break;

                case ClientRecordType.Abandoned:
                    var abandoned = (long)value;
                    if (_pending.Remove(abandoned, out var givenUp))
                    {
                        RememberFinished(givenUp.Request.OperationId, replyHandedOver: false);
                    }

                    foreach (var (id, last) in sessions.Where(s => s.Value.EntryId == abandoned).ToList())
                    {
                        sessions.Remove(id);
                    }

                    break;

                case ClientRecordType.SessionClosed:
                    sessions.Remove((string)value);
                    break;
            }
        }

        foreach (var entry in _pending.Values)
        {
            if (entry.Request.OperationId is { } operationId)
            {
                _pendingOperations.Add(operationId);
            }
        }

        // A session is idle when its last request is done or answered; one whose last request awaits a reply is that entry's.
        IdleSessions = [.. sessions
            .Where(s => !_pending.TryGetValue(s.Value.EntryId, out var entry) || entry.Reply is not null)
            .Select(s => new ClientSession(s.Key, s.Value.Authority, s.Value.Sequence + 1))];
        ClientEvents.StoreOpened(_logger, Log.BeginAddress, Log.DurableUntil, records, _pending.Count, IdleSessions.Count);
    }

    /// <summary>
    /// Stores a new request durably (t0–t1) and returns its entry, claimed by the caller. A request naming an operation id
    /// that is pending or finished is refused before anything is stored.
    /// </summary>
    /// <exception cref="PersistentOperationRepeatedException">The operation id names a finished operation.</exception>
    /// <exception cref="InvalidOperationException">The operation id names a pending operation.</exception>
    public async Task<ClientEntry> AddAsync(StoredRequest request, CancellationToken cancellationToken)
    {
        var record = ClientRecords.Encode(request with { EntryId = 0 }); // outside the gate: it copies the body
        ClientEntry entry;
        long lsn;
        lock (_gate)
        {
            if (request.OperationId is { } operationId)
            {
                if (_finished.TryGetValue(operationId, out var handedOver))
                {
                    throw new PersistentOperationRepeatedException(operationId, handedOver);
                }

                if (_pendingOperations.Contains(operationId))
                {
                    throw new InvalidOperationException(
                        $"Operation '{operationId}' is stored and not finished: RecoverAsync sends it and hands back its reply. It is not stored twice.");
                }
            }

            // Appended under the gate, so that two requests with one operation id cannot both pass the check above.
            lsn = Append(record);
            entry = new ClientEntry(request with { EntryId = lsn }, lsn) { Claimed = true };
            _pending[lsn] = entry;
            if (request.OperationId is { } stored)
            {
                _pendingOperations.Add(stored);
            }
        }

        await Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
        return entry;
    }

    /// <summary>Stores the entry's request again with a new session and number (its first attempt found no session).</summary>
    public async Task MoveAsync(ClientEntry entry, ClientSession session, CancellationToken cancellationToken)
    {
        var request = entry.Request with { SessionId = session.Id, Sequence = session.NextSequence };
        var lsn = Append(ClientRecords.Encode(request));
        await Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
        entry.Request = request;
    }

    /// <summary>Stores the entry's reply durably (t8 of a resend): only then may its session take another request (which acknowledges it).</summary>
    public async Task AddReplyAsync(ClientEntry entry, StoredReply reply, CancellationToken cancellationToken)
    {
        var lsn = Append(ClientRecords.Encode(reply));
        await Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
        entry.Reply = reply;
    }

    /// <summary>The entry is done (handed over, or given up): durable before the caller acts on it.</summary>
    public async Task FinishAsync(ClientEntry entry, ClientRecordType how, CancellationToken cancellationToken)
    {
        var lsn = Append(ClientRecords.Encode(how, entry.Id));
        await Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
        lock (_gate)
        {
            _pending.Remove(entry.Id);
            if (entry.Request.OperationId is { } operationId)
            {
                _pendingOperations.Remove(operationId);
            }

            RememberFinished(entry.Request.OperationId, how == ClientRecordType.Delivered);
        }

        if (Interlocked.Increment(ref _doneSinceTruncation) >= TruncateEvery)
        {
            await TruncateAsync(cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>Idle sessions ended at their services: forgotten, durably, so the next start opens new ones.</summary>
    public async Task CloseSessionsAsync(IEnumerable<string> sessionIds, CancellationToken cancellationToken)
    {
        var lsn = -1L;
        foreach (var id in sessionIds)
        {
            lsn = Append(ClientRecords.EncodeSessionClosed(id));
        }

        if (lsn >= 0)
        {
            await Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>The entry was not finished by its call (it failed or was cancelled): <see cref="PersistentSessionClient.RecoverAsync"/> may take it.</summary>
    public void Release(ClientEntry entry)
    {
        lock (_gate)
        {
            entry.Claimed = false;
        }
    }

    /// <summary>Claims every pending entry no call is sending, oldest first.</summary>
    public List<ClientEntry> ClaimPending()
    {
        lock (_gate)
        {
            var claimed = _pending.Values.Where(e => !e.Claimed).OrderBy(e => e.Id).ToList();
            foreach (var entry in claimed)
            {
                entry.Claimed = true;
            }

            return claimed;
        }
    }

    public bool TryGet(long id, out ClientEntry entry)
    {
        lock (_gate)
        {
            return _pending.TryGetValue(id, out entry!);
        }
    }

    /// <summary>Drops the records no pending entry needs: everything before the oldest pending entry's first record.</summary>
    public async Task TruncateAsync(CancellationToken cancellationToken)
    {
        if (!await _truncating.WaitAsync(0, cancellationToken).ConfigureAwait(false))
        {
            return;
        }

        try
        {
            Interlocked.Exchange(ref _doneSinceTruncation, 0);
            long until;
            List<FinishedOperation> finished;
            lock (_gate)
            {
                until = _pending.Count == 0 ? Log.DurableUntil : _pending.Values.Min(e => e.FirstLsn);
                finished = [.. _finishedOrder.Select(id => new FinishedOperation(id, _finished[id]))];
            }

            if (until > Log.BeginAddress)
            {
                // The finished operation ids outlive the records they came from: listed in one record after them, durable
                // before anything is dropped (it lies at or after the durable end read above, so the truncation keeps it).
                if (finished.Count > 0)
                {
                    await Log.WaitUntilDurableAsync(Append(ClientRecords.Encode(finished)), cancellationToken).ConfigureAwait(false);
                }

                await Log.TruncateUntilAsync(until, cancellationToken).ConfigureAwait(false);
                ClientEvents.StoreTruncated(_logger, until);
            }
        }
        finally
        {
            _truncating.Release();
        }
    }

    /// <summary>Remembers a finished operation id, forgetting the oldest beyond the retention. Under <see cref="_gate"/> (or while reading back).</summary>
    private void RememberFinished(string? operationId, bool replyHandedOver)
    {
        if (operationId is null || _finishedRetention == 0)
        {
            return;
        }

        if (_finished.TryAdd(operationId, replyHandedOver))
        {
            _finishedOrder.Enqueue(operationId);
            while (_finishedOrder.Count > _finishedRetention)
            {
                _finished.Remove(_finishedOrder.Dequeue());
            }
        }
        else
        {
            _finished[operationId] = replyHandedOver;
        }
    }

    private long Append(byte[] data) => Log.Append(RecordKind.Payload, new Payload { Tag = PayloadTag, Data = ByteString.CopyFrom(data) });

    public async ValueTask DisposeAsync()
    {
        await Log.DisposeAsync().ConfigureAwait(false);
        _truncating.Dispose();
    }
}
