using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Http;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Domain;

/// <summary>
/// Issue 49, the fan-out runs that lost an acknowledged payment (seeds 2424, 7979 and 5656 of the quiet kill test): a
/// member's call was answered with a reply whose DV was read from the session after a rollback had begun, when the
/// rollback had already reset the session's DV to its recovery point's. The held reply depended on the caller's lost
/// epoch (`C=10.10702288`), the DV it carried did not (`A=10.9156424,D=10.9067564,B=11.8943564`): the caller kept the
/// reply, the rollback then took the request back, and the caller's next call was refused as a gap for ever. A reply's
/// DV is now the one its request ran with: fixed under the execution lock for a live request, and read with the
/// session's generation for a duplicate (a rollback begun since the retry was admitted refuses it: 503, retry).
/// </summary>
public sealed class ReplyDvDuringRollbackTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static readonly DependencyVector OnLostState = DependencyVector.Empty.With("B", new StateId(3, 5000));

    [Fact]
    public async Task ADuplicateAdmittedBeforeARollbackBegan_IsRefused_NotAnsweredWithTheResetDv()
    {
        await using var server = await StartAsync();
        var session = server.Session(await server.StartSessionAsync());
        session.Dv = OnLostState;
        var request = MemberCall(session);
        var admittedAt = session.Generation;

        // The rollback begins, and (under the execution lock, while the retry's reply is read) resets the DV.
        session.BeginRollback();
        session.Dv = DependencyVector.Empty;

        var gate = server.App.Services.GetRequiredService<DomainReplyGate>();
        await Assert.ThrowsAsync<DomainUnavailableException>(() => gate.DuplicateSafeAsync(request, admittedAt).AsTask());
        Assert.False(request.HttpContext.Response.Headers.ContainsKey(ProtocolHeaders.Dv));
    }

    [Fact]
    public async Task ADuplicate_WithNoRollbackSince_CarriesTheDvItsReplyDependsOn()
    {
        await using var server = await StartAsync();
        var session = server.Session(await server.StartSessionAsync());
        session.Dv = OnLostState;
        var request = MemberCall(session);

        var gate = server.App.Services.GetRequiredService<DomainReplyGate>();
        await gate.DuplicateSafeAsync(request, session.Generation);

        Assert.Equal("B=3.5000", request.HttpContext.Response.Headers[ProtocolHeaders.Dv].ToString());
    }

    [Fact]
    public async Task ALiveReply_KeepsTheDvItWasMadeSafeWith_WhenTheSessionIsResetBeforeItIsSent()
    {
        await using var server = await StartAsync();
        var session = server.Session(await server.StartSessionAsync());
        session.Dv = OnLostState;
        var request = MemberCall(session);

        var gate = server.App.Services.GetRequiredService<DomainReplyGate>();
        await gate.MakeSafeAsync(request, replyLsn: 0);
        session.BeginRollback();
        session.Dv = DependencyVector.Empty; // the execution lock was released; a rollback reset the session

        Assert.Equal("B=3.5000", request.ReplyDvHeader);
    }

    [Fact]
    public async Task AReply_ThatDependsOnKnownLostState_NeverLeaves()
    {
        await using var server = await StartAsync();
        var session = server.Session(await server.StartSessionAsync());
        session.Dv = OnLostState;
        await server.Runtime.Domain.LearnAsync([new RecoveredStateNumber("B", new StateId(3, 4096))], TestContext.Current.CancellationToken);
        var gate = server.App.Services.GetRequiredService<DomainReplyGate>();

        await Assert.ThrowsAsync<OrphanException>(() => gate.MakeSafeAsync(MemberCall(session), replyLsn: 0).AsTask());
        await Assert.ThrowsAsync<OrphanException>(() => gate.DuplicateSafeAsync(MemberCall(session), session.Generation).AsTask());
    }

    private Task<TestServer> StartAsync() => StartAndRecoverAsync(TestServer.StartAsync(_dir.Path, o =>
    {
        o.ServiceName = "A";
        o.Calls.PeerKey = "reply-dv-during-rollback-test-key-0123456789";
        o.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
        o.Domain.Members["B"] = new Uri("http://127.0.0.1:2/");
    }));

    private static async Task<TestServer> StartAndRecoverAsync(Task<TestServer> starting)
    {
        var server = await starting;
        await server.RecoveryCompletion;
        return server;
    }

    /// <summary>A call from member B (it carried a DV), in <paramref name="session"/>.</summary>
    private static PersistentRequest MemberCall(Session session)
        => new(new DefaultHttpContext()) { Session = session, IncomingDv = DependencyVector.Empty.With("B", new StateId(3, 4000)) };
}
