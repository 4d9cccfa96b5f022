using FASTER.core;
using Google.Protobuf;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.AspNetCore.Tests.Domain;

/// <summary>The distributed flush ([MSP §3.1]) asks the members and forces the local log at the same time.</summary>
public sealed class DistributedFlushTests : IDisposable
{
    private const string PeerKey = "distributed-flush-test-key-0123456789abcdef";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task MembersAreAskedBeforeTheLocalForceWrites_NotAfterIt()
    {
        // A stand-in for member B's domain endpoints: it answers at once and says when B's flush request arrived.
        var flushArrived = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var memberBuilder = WebApplication.CreateBuilder();
        memberBuilder.WebHost.UseUrls("http://127.0.0.1:0");
        memberBuilder.Logging.ClearProviders();
        await using var member = memberBuilder.Build();
        member.MapPost(ServiceDomain.FlushPath, () =>
        {
            flushArrived.TrySetResult();
            return Results.Ok();
        });
        member.MapGet(ServiceDomain.RecoveredPath, () => Results.Json(Array.Empty<object>()));
        member.MapPost(ServiceDomain.RecoveredPath, () => Results.Ok());
        await member.StartAsync(TestContext.Current.CancellationToken);
        var memberAddress = new Uri(member.Urls.First());

        // A's log holds each write until B's flush request has arrived (5 s at most): a flush that forces the local log
        // before it asks the members makes that write wait its whole 5 s.
        var gate = new WriteGate(flushArrived.Task);
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "A";
            o.Calls.PeerKey = PeerKey;
            o.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
            o.Domain.Members["B"] = memberAddress;
            o.Log.DeviceFactory = (basePath, io) => new GatedDevice(DurableLog.CreateDefaultDevice(basePath, io), gate);
        });
        await server.RecoveryCompletion;

        var runtime = server.Runtime;
        var lsn = runtime.Log.Append(RecordKind.Payload, new Payload { Data = ByteString.CopyFromUtf8("not yet durable") });
        var dv = DependencyVector.Empty
            .With("A", new StateId(runtime.Epoch, lsn))
            .With("B", new StateId(1, 4096));

        gate.Armed = true;
        await runtime.Domain.FlushAsync(dv, TestContext.Current.CancellationToken);

        Assert.True(runtime.Log.DurableUntil > lsn);
        Assert.True(gate.WritesHeld > 0, "the local force wrote nothing");
        Assert.Equal(0, gate.WritesTimedOut);
    }

    /// <summary>
    /// A member that restarts refuses connections and then answers 503 while it recovers, for about a second: the flush
    /// asks again until <see cref="DomainOptions.FlushTimeout"/> has passed, so the reply that needs it waits instead of
    /// getting 503 at once (it did until 2026-11-26: the timeout bounded one attempt only).
    /// </summary>
    [Fact]
    public async Task MemberRecoveringForAMoment_TheFlushAsksAgain_AndSucceeds()
    {
        var attempts = 0;
        await using var member = await StartMemberAsync(() => Interlocked.Increment(ref attempts) <= 3 ? Results.StatusCode(503) : Results.Ok());
        await using var server = await StartServiceAsync(new Uri(member.Urls.First()), TimeSpan.FromSeconds(30));

        await server.Runtime.Domain.FlushAsync(DependencyVector.Empty.With("B", new StateId(1, 4096)), TestContext.Current.CancellationToken);

        Assert.Equal(4, Volatile.Read(ref attempts));
    }

    [Fact]
    public async Task MemberRefusesLongerThanTheFlushTimeout_TheFlushGivesUp_WithDomainUnavailable()
    {
        var attempts = 0;
        await using var member = await StartMemberAsync(() =>
        {
            Interlocked.Increment(ref attempts);
            return Results.StatusCode(503);
        });
        await using var server = await StartServiceAsync(new Uri(member.Urls.First()), TimeSpan.FromSeconds(1));

        var error = await Assert.ThrowsAsync<DomainUnavailableException>(() =>
            server.Runtime.Domain.FlushAsync(DependencyVector.Empty.With("B", new StateId(1, 4096)), TestContext.Current.CancellationToken));

        Assert.Contains("did not confirm the distributed flush within 1000 ms", error.Message, StringComparison.Ordinal);
        Assert.True(Volatile.Read(ref attempts) >= 2, $"asked {attempts} time(s)");
    }

    [Fact]
    public async Task MemberOutOfReach_TheFlushGivesUpAfterTheFlushTimeout()
    {
        // A port nobody listens on: every attempt is refused. Port 1 (privileged, as the other unreachable members here), not a
        // free port probed and released: tests running in parallel start servers on ephemeral ports, and one could get it.
        await using var server = await StartServiceAsync(new Uri("http://127.0.0.1:1/"), TimeSpan.FromMilliseconds(500));

        var error = await Assert.ThrowsAsync<DomainUnavailableException>(() =>
            server.Runtime.Domain.FlushAsync(DependencyVector.Empty.With("B", new StateId(1, 4096)), TestContext.Current.CancellationToken));

        Assert.Contains("within 500 ms", error.Message, StringComparison.Ordinal);
    }

    private static async Task<WebApplication> StartMemberAsync(Func<IResult> flush)
    {
        var memberBuilder = WebApplication.CreateBuilder();
        memberBuilder.WebHost.UseUrls("http://127.0.0.1:0");
        memberBuilder.Logging.ClearProviders();
        var member = memberBuilder.Build();
        member.MapPost(ServiceDomain.FlushPath, flush);
        member.MapGet(ServiceDomain.RecoveredPath, () => Results.Json(Array.Empty<object>()));
        member.MapPost(ServiceDomain.RecoveredPath, () => Results.Ok());
        await member.StartAsync(TestContext.Current.CancellationToken);
        return member;
    }

    private async Task<TestServer> StartServiceAsync(Uri member, TimeSpan flushTimeout)
    {
        var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "A";
            o.Calls.PeerKey = PeerKey;
            o.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
            o.Domain.Members["B"] = member;
            o.Domain.FlushTimeout = flushTimeout;
        });
        await server.RecoveryCompletion;
        return server;
    }

    private sealed class WriteGate(Task open)
    {
        private int _held;
        private int _timedOut;

        public volatile bool Armed;

        public int WritesHeld => Volatile.Read(ref _held);

        public int WritesTimedOut => Volatile.Read(ref _timedOut);

        public void Pass()
        {
            if (!Armed)
            {
                return;
            }

            Interlocked.Increment(ref _held);
            if (!open.Wait(TimeSpan.FromSeconds(5)))
            {
                Interlocked.Increment(ref _timedOut);
            }
        }
    }

    private sealed class GatedDevice(IDevice inner, WriteGate gate) : DelegatingDevice(inner)
    {
        public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite, DeviceIOCompletionCallback callback, object context)
        {
            gate.Pass();
            base.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
        }
    }
}
