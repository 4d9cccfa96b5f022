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
        Assert.Empty(SessionOwner.Of(anonymous)!);
        Assert.True(SessionOwner.Owns(anonymous, [], SessionOwner.CurrentVersion));
        var alice = User("A", new Claim(ClaimTypes.NameIdentifier, "alice"));
        Assert.False(SessionOwner.Owns(anonymous, SessionOwner.Of(alice)!, SessionOwner.CurrentVersion));
        Assert.True(SessionOwner.Owns(alice, SessionOwner.Of(alice)!, SessionOwner.CurrentVersion));
    }

    [Fact]
    public void Owns_SessionStartedByAnOlderBuild_IsCheckedWithItsVersion()
    {
        var alice = User("A", new Claim(ClaimTypes.NameIdentifier, "alice"));
        var legacyOwner = SessionOwner.Of(alice, version: 0)!;
        Assert.True(SessionOwner.Owns(alice, legacyOwner, version: 0));
        Assert.False(SessionOwner.Owns(alice, legacyOwner, SessionOwner.CurrentVersion));
    }

    /// <summary>
    /// Issue 32: an authenticated principal with none of the identifying claims (an API-key handler's principal with only
    /// <c>client_id</c>) was taken for anonymous: every such tenant shared sessions and Idempotency-Keys. It is unidentified
    /// now (null: the caller refuses it), unless the application names the claim or computes the identity.
    /// </summary>
    [Fact]
    public void Of_AuthenticatedWithoutAnIdentifyingClaim_IsUnidentified_NotAnonymous_UnlessConfigured()
    {
        var tenantA = User("ApiKey", new Claim("client_id", "tenant-a"));
        var tenantB = User("ApiKey", new Claim("client_id", "tenant-b"));
        Assert.Null(SessionOwner.Of(tenantA));
        Assert.Empty(SessionOwner.Of(tenantA, version: 2)!); // what version 2 did: anonymous

        var byClaim = new OwnerIdentityOptions("client_id", null);
        Assert.NotNull(SessionOwner.Of(tenantA, SessionOwner.CurrentVersion, byClaim));
        Assert.NotEqual(SessionOwner.Of(tenantA, SessionOwner.CurrentVersion, byClaim), SessionOwner.Of(tenantB, SessionOwner.CurrentVersion, byClaim));
        Assert.False(SessionOwner.Owns(tenantB, SessionOwner.Of(tenantA, SessionOwner.CurrentVersion, byClaim)!, SessionOwner.CurrentVersion, byClaim));
        Assert.False(SessionOwner.Owns(tenantB, SessionOwner.Of(tenantA, SessionOwner.CurrentVersion, byClaim)!, SessionOwner.CurrentVersion));

        var computed = new OwnerIdentityOptions(null, user => user.FindFirst("client_id")?.Value);
        Assert.NotNull(SessionOwner.Of(tenantA, SessionOwner.CurrentVersion, computed));
        Assert.Null(SessionOwner.Of(User("ApiKey", new Claim("scope", "x")), SessionOwner.CurrentVersion, computed));

        // A configured claim is the only one used: a principal without it is unidentified even with a name identifier.
        Assert.Null(SessionOwner.Of(User("A", new Claim(ClaimTypes.NameIdentifier, "alice")), SessionOwner.CurrentVersion, byClaim));
    }

    /// <summary>Issue 32: two authentication schemes that issue the same name identifier (same issuer) are two owners.</summary>
    [Fact]
    public void Of_SameNameIdentifierFromTwoSchemes_AreTwoOwners()
    {
        var cookie = User("Cookies", new Claim(ClaimTypes.NameIdentifier, "alice", ClaimValueTypes.String, "LOCAL AUTHORITY"));
        var bearer = User("Bearer", new Claim(ClaimTypes.NameIdentifier, "alice", ClaimValueTypes.String, "LOCAL AUTHORITY"));
        Assert.Equal(SessionOwner.Of(cookie, version: 2), SessionOwner.Of(bearer, version: 2));
        Assert.NotEqual(SessionOwner.Of(cookie), SessionOwner.Of(bearer));
    }
}
