using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Replay;

/// <summary>The code an operation belongs to, as the classification of its writes needs it.</summary>
internal sealed class WriteScope
{
    public WriteScope(ISymbol member, SyntaxNode? root)
    {
        Member = member;
        Root = root;
    }

    /// <summary>The member (method, accessor, constructor) the operation is in.</summary>
    public ISymbol Member { get; }

    /// <summary>The persistent lambda or local function (see <see cref="PersistentContext.Root"/>); null otherwise.</summary>
    public SyntaxNode? Root { get; }

    /// <summary>True in an instance constructor of <paramref name="type"/> (or of a type derived from it): writes to <c>this</c> initialize.</summary>
    public bool IsInstanceConstructorOf(INamedTypeSymbol type)
    {
        if (Member is not IMethodSymbol { MethodKind: MethodKind.Constructor } constructor)
        {
            return false;
        }

        for (var current = constructor.ContainingType; current is not null; current = current.BaseType)
        {
            if (SymbolEqualityComparer.Default.Equals(current.OriginalDefinition, type.OriginalDefinition))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True in the static constructor of <paramref name="type"/>: it runs once, before any request.</summary>
    public bool IsStaticConstructorOf(INamedTypeSymbol type)
        => Member is IMethodSymbol { MethodKind: MethodKind.StaticConstructor } constructor
           && SymbolEqualityComparer.Default.Equals(constructor.ContainingType.OriginalDefinition, type.OriginalDefinition);

    /// <summary>True when <paramref name="variable"/> (a local or parameter) is declared outside the persistent lambda that writes it.</summary>
    public bool IsCapturedFromOutside(ISymbol variable)
    {
        if (Root is null)
        {
            return false;
        }

        foreach (var reference in variable.DeclaringSyntaxReferences)
        {
            return reference.SyntaxTree != Root.SyntaxTree || !Root.Span.Contains(reference.Span);
        }

        // No declaration (the implicit 'args' of top-level statements): declared outside.
        return true;
    }
}
