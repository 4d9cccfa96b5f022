using System.Security.Claims;
using PersistentServices.Sessions;

namespace PersistentServices.Tests.Sessions;

public sealed class SessionOwnerTests
{
    private static ClaimsPrincipal User(string scheme, params Claim[] claims) => new(new ClaimsIdentity(claims, scheme));

    [Fact]
    public void Of_OneSchemesNameEqualToAnothersNameIdentifier_AreDifferentOwners()
    {
        // Scheme A identifies "alice" by NameIdentifier; scheme B only has a Name claim whose value is "alice".
        var byId = User("A", new Claim(ClaimTypes.NameIdentifier, "alice", ClaimValueTypes.String, "issuer-a"));
        var byName = User("B", new Claim(ClaimTypes.Name, "alice", ClaimValueTypes.String, "issuer-b"));
        Assert.Equal(SessionOwner.Of(byId, version: 0), SessionOwner.Of(byName, version: 0)); // the old hash confused them
        Assert.NotEqual(SessionOwner.Of(byId), SessionOwner.Of(byName));
    }

    [Fact]
    public void Of_SameClaimFromAnotherIssuer_IsAnotherOwner()
        => Assert.NotEqual(
            SessionOwner.Of(User("A", new Claim(ClaimTypes.NameIdentifier, "42", ClaimValueTypes.String, "issuer-a"))),
            SessionOwner.Of(User("A", new Claim(ClaimTypes.NameIdentifier, "42", ClaimValueTypes.String, "issuer-b"))));

    [Fact]
    public void Of_Anonymous_IsEmpty_AndOwnsOnlyUnboundSessions()
    {
        var anonymous = new ClaimsPrincipal(new ClaimsIdentity());
        Assert.Empty(SessionOwner.Of(anonymous));
        Assert.True(SessionOwner.Owns(anonymous, [], SessionOwner.CurrentVersion));
        var alice = User("A", new Claim(ClaimTypes.NameIdentifier, "alice"));
        Assert.False(SessionOwner.Owns(anonymous, SessionOwner.Of(alice), SessionOwner.CurrentVersion));
        Assert.True(SessionOwner.Owns(alice, SessionOwner.Of(alice), SessionOwner.CurrentVersion));
    }

    [Fact]
    public void Owns_SessionStartedByAnOlderBuild_IsCheckedWithItsVersion()
    {
        var alice = User("A", new Claim(ClaimTypes.NameIdentifier, "alice"));
        var legacyOwner = SessionOwner.Of(alice, version: 0);
        Assert.True(SessionOwner.Owns(alice, legacyOwner, version: 0));
        Assert.False(SessionOwner.Owns(alice, legacyOwner, SessionOwner.CurrentVersion));
    }
}
