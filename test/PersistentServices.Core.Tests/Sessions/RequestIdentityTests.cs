using System.Text;
using PersistentServices.Sessions;

namespace PersistentServices.Tests.Sessions;

public sealed class RequestIdentityTests
{
    [Fact]
    public void Hash_FieldsThatJoinAlikeWithNewlines_DifferInVersion2()
    {
        // A decoded path may hold '\n': "/a\n?b" + "" and "/a" + "?b" joined with '\n' are the same bytes in version 0.
        var body = Encoding.UTF8.GetBytes("{}");
        Assert.Equal(
            RequestIdentity.HashVersion0("POST", "/a\n?b", "", body),
            RequestIdentity.HashVersion0("POST", "/a", "?b\n", body));
        Assert.NotEqual(
            RequestIdentity.Hash("POST", "/a\n?b", "", body),
            RequestIdentity.Hash("POST", "/a", "?b\n", body));
    }

    [Fact]
    public void Hash_BodyBytesCannotImitateAQuery()
    {
        Assert.NotEqual(
            RequestIdentity.Hash("POST", "/a", "?x", Encoding.UTF8.GetBytes("y")),
            RequestIdentity.Hash("POST", "/a", "?xy", []));
    }

    [Fact]
    public void Hash_SameRequest_SameHash()
        => Assert.Equal(RequestIdentity.Hash("PUT", "/p", "?q=1", [1, 2]), RequestIdentity.Hash("PUT", "/p", "?q=1", [1, 2]));

    [Fact]
    public void Admit_RetryOfARequestLoggedWithVersion0_IsRecognizedByItsVersion0Hash()
    {
        var session = new Session(SessionId.NewRandom(), [], DateTimeOffset.UnixEpoch, replaying: false);
        session.RecoverRequest(64, 1, RequestIdentity.HashVersion0("POST", "/a", "", [1]), 0, DateTimeOffset.UnixEpoch);
        Assert.True(session.NeedsVersion0Hash(1));
        Assert.Equal(AdmitOutcome.Mismatch, session.Admit(1, RequestIdentity.Hash("POST", "/a", "", [1])).Outcome);
        Assert.Equal(AdmitOutcome.Duplicate, session.Admit(1, RequestIdentity.Hash("POST", "/a", "", [1]), RequestIdentity.HashVersion0("POST", "/a", "", [1])).Outcome);
        Assert.Equal(AdmitOutcome.Execute, session.Admit(2, RequestIdentity.Hash("POST", "/b", "", [])).Outcome);
        Assert.False(session.NeedsVersion0Hash(2));
    }
}
