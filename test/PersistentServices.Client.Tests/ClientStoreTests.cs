using Microsoft.Extensions.Logging.Abstractions;

namespace PersistentServices.Client.Tests;

/// <summary>The client store on a real log: what it reads back after it was closed (as after a crash: everything it waited for is durable).</summary>
public sealed class ClientStoreTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    private static StoredRequest Request(string session, long sequence, string body)
        => new(0, session, sequence, "POST", "http://svc.test/op", "op-" + body, [new("Content-Type", "text/plain"), new("X-Two", "1"), new("X-Two", "2")], System.Text.Encoding.UTF8.GetBytes(body));

    [Fact]
    public async Task OpenAsync_ReadsBackPendingEntriesAndIdleSessions()
    {
        long pendingId, answeredId;
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            var done = await store.AddAsync(Request("a", 1, "done"), Ct);
            await store.AddReplyAsync(done, new StoredReply(done.Id, 200, [], [1]), Ct);
            await store.FinishAsync(done, ClientRecordType.Delivered, Ct);
            var answered = await store.AddAsync(Request("a", 2, "answered"), Ct);
            await store.AddReplyAsync(answered, new StoredReply(answered.Id, 200, [new("X-R", "r")], [2]), Ct);
            var pending = await store.AddAsync(Request("b", 7, "pending"), Ct);
            var abandoned = await store.AddAsync(Request("c", 1, "abandoned"), Ct);
            await store.FinishAsync(abandoned, ClientRecordType.Abandoned, Ct);
            (pendingId, answeredId) = (pending.Id, answered.Id);
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            Assert.Equal(2, store.PendingCount);
            Assert.True(store.TryGet(pendingId, out var pending));
            Assert.Null(pending.Reply);
            Assert.Equal(("b", 7L), (pending.Request.SessionId, pending.Request.Sequence));
            Assert.Equal(["1", "2"], pending.Request.Headers.Where(h => h.Key == "X-Two").Select(h => h.Value));
            Assert.Equal("pending"u8.ToArray(), pending.Request.Body);
            Assert.True(store.TryGet(answeredId, out var answered));
            Assert.Equal([2], answered.Reply!.Body);
            var idle = Assert.Single(store.IdleSessions); // a: its last request is answered; b awaits a reply; c was given up
            Assert.Equal(("a", 3L, "http://svc.test"), (idle.Id, idle.NextSequence, idle.Authority));
        }
    }

    [Fact]
    public async Task MoveAsync_TheEntryKeepsItsIdWithTheNewSession()
    {
        long id;
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            var entry = await store.AddAsync(Request("old", 5, "m"), Ct);
            await store.MoveAsync(entry, new ClientSession("new", "http://svc.test", 1), Ct);
            id = entry.Id;
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            Assert.Equal(1, store.PendingCount);
            Assert.True(store.TryGet(id, out var entry));
            Assert.Equal(("new", 1L), (entry.Request.SessionId, entry.Request.Sequence));
        }
    }

    [Fact]
    public async Task TruncateAsync_DropsWhatNoPendingEntryNeeds_AndKeepsThePendingOnes()
    {
        long pendingId;
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            store.TruncateEvery = int.MaxValue;
            for (var i = 1; i <= 20; i++)
            {
                var entry = await store.AddAsync(Request("a", i, "d" + i), Ct);
                await store.AddReplyAsync(entry, new StoredReply(entry.Id, 200, [], [1]), Ct);
                await store.FinishAsync(entry, ClientRecordType.Delivered, Ct);
            }

            pendingId = (await store.AddAsync(Request("b", 1, "kept"), Ct)).Id;
            var before = store.Log.BeginAddress;
            await store.TruncateAsync(Ct);
            Assert.True(store.Log.BeginAddress > before);
            Assert.Equal(pendingId, store.Log.BeginAddress);
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            Assert.Equal(1, store.PendingCount);
            Assert.True(store.TryGet(pendingId, out _));
        }
    }

    [Fact]
    public void Decode_NewerFormat_IsRefusedWithAClearError()
    {
        var record = ClientRecords.Encode(ClientRecordType.Delivered, 5);
        record[0] = ClientRecords.FormatVersion + 1;

        var error = Assert.Throws<InvalidDataException>(() => ClientRecords.Decode(record, 42));

        Assert.Contains("LSN 42", error.Message, StringComparison.Ordinal);
        Assert.Contains("format 2", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task AddAsync_AFinishedOperationId_IsRefused_AcrossRestartsAndTruncations()
    {
        // The application's crash right after a handover: it sends the operation again. The store remembers the id.
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            store.TruncateEvery = 4;
            var handedOver = await store.AddAsync(Request("a", 1, "handed"), Ct);
            await store.FinishAsync(handedOver, ClientRecordType.Delivered, Ct);
            var givenUp = await store.AddAsync(Request("a", 2, "unknown"), Ct);
            await store.FinishAsync(givenUp, ClientRecordType.Abandoned, Ct);
            for (var i = 3; i <= 12; i++) // three truncations: the Delivered and Abandoned records above are dropped
            {
                var entry = await store.AddAsync(Request("a", i, "later" + i), Ct);
                await store.FinishAsync(entry, ClientRecordType.Delivered, Ct);
            }

            Assert.True(store.Log.BeginAddress > givenUp.Id, "the truncations dropped the records the ids came from");
            var repeated = await Assert.ThrowsAsync<PersistentOperationRepeatedException>(() => store.AddAsync(Request("a", 13, "handed"), Ct));
            Assert.Equal(("op-handed", true), (repeated.OperationId, repeated.ReplyHandedOver));
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            var handed = await Assert.ThrowsAsync<PersistentOperationRepeatedException>(() => store.AddAsync(Request("a", 13, "handed"), Ct));
            Assert.True(handed.ReplyHandedOver);
            var unknown = await Assert.ThrowsAsync<PersistentOperationRepeatedException>(() => store.AddAsync(Request("a", 13, "unknown"), Ct));
            Assert.False(unknown.ReplyHandedOver);
            await Assert.ThrowsAsync<PersistentOperationRepeatedException>(() => store.AddAsync(Request("a", 13, "later12"), Ct));
            Assert.Equal(0, store.PendingCount); // nothing was stored
            var fresh = await store.AddAsync(Request("a", 13, "fresh"), Ct);
            Assert.Equal("op-fresh", fresh.Request.OperationId);
        }
    }

    [Fact]
    public async Task AddAsync_APendingOperationId_IsRefused_AndRecoveryKeepsTheOneEntry()
    {
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            await store.AddAsync(Request("a", 1, "pending"), Ct);
            await Assert.ThrowsAsync<InvalidOperationException>(() => store.AddAsync(Request("b", 1, "pending"), Ct));
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            Assert.Equal(1, store.PendingCount);
            await Assert.ThrowsAsync<InvalidOperationException>(() => store.AddAsync(Request("b", 1, "pending"), Ct));
        }
    }

    [Fact]
    public async Task FinishedOperations_BeyondTheRetention_AreForgottenOldestFirst()
    {
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct, finishedRetention: 3))
        {
            store.TruncateEvery = 2;
            for (var i = 1; i <= 5; i++)
            {
                var entry = await store.AddAsync(Request("a", i, "r" + i), Ct);
                await store.FinishAsync(entry, ClientRecordType.Delivered, Ct);
            }
        }

        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct, finishedRetention: 3))
        {
            foreach (var kept in new[] { "r3", "r4", "r5" })
            {
                await Assert.ThrowsAsync<PersistentOperationRepeatedException>(() => store.AddAsync(Request("a", 9, kept), Ct));
            }

            await store.AddAsync(Request("a", 9, "r1"), Ct); // forgotten: beyond the retention
        }
    }

    [Fact]
    public async Task FinishedOperations_ConcurrentRequestsWithOneOperationId_StoreOnlyOne()
    {
        await using var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct);
        var attempts = await Task.WhenAll(Enumerable.Range(1, 8).Select(i => Task.Run(async () =>
        {
            try
            {
                await store.AddAsync(Request("s" + i, 1, "same"), Ct);
                return true;
            }
            catch (InvalidOperationException)
            {
                return false;
            }
        }, Ct)));
        Assert.Single(attempts, stored => stored);
        Assert.Equal(1, store.PendingCount);
    }
}
