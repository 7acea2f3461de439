// GraphQL over HTTP with the operator token, and the two failures an operator must tell
// apart: the server is not there, or it does not accept the token.

export type FailureKind = "unreachable" | "unauthenticated" | "error";

export class ApiError extends Error {
  constructor(readonly kind: FailureKind, message: string, readonly code?: string) {
    super(message);
  }
}

let token = "";

export function setToken(value: string): void {
  token = value;
}

export function currentToken(): string {
  return token;
}

export function authorization(): string {
  return `Bearer ${token}`;
}

interface GraphQLBody<T> {
  data?: T;
  errors?: { message: string; extensions?: { code?: string } }[];
}

export function classify(errors: { message: string; extensions?: { code?: string } }[]): ApiError {
  const first = errors[0];
  const code = first?.extensions?.code;
  if (code === "UNAUTHENTICATED") {
    return new ApiError("unauthenticated", "The server rejected this operator token.", code);
  }
  return new ApiError("error", first?.message ?? "unknown error", code);
}

export async function gql<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
  let response: Response;
  try {
    response = await fetch("/graphql", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: authorization() },
      body: JSON.stringify({ query, variables }),
    });
  } catch {
    throw new ApiError("unreachable", "The AgentRM server is unreachable.");
  }
  let body: GraphQLBody<T>;
  try {
    body = (await response.json()) as GraphQLBody<T>;
  } catch {
    throw new ApiError(response.status >= 500 ? "unreachable" : "error",
      `The server answered HTTP ${response.status} without a GraphQL body.`);
  }
  if (body.errors?.length) throw classify(body.errors);
  if (body.data === undefined) throw new ApiError("error", "empty answer");
  return body.data;
}
